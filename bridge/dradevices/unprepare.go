package dradevices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/spec"
)

// Unprepare runs DEL for every request-id recorded for claim uid, removes
// its CDI spec file and forgets it. A DEL that fails keeps the claim
// recorded and is the error: the kubelet asks again. The DEL of a device
// whose pool is no longer served (its drop-in was removed) cannot run and
// is skipped with a warning: the plugin's state keeps that allocation
// until the plugin's GC is run.
//
// A claim the checkpoint does not record (a checkpoint lost, or set
// aside) is looked for in the plugins: every request-id <uid>-<n> a DRA
// drop-in's LIST has is DELed. A claim found nowhere has nothing left to
// release; its spec file is removed all the same.
func (p *Preparer) Unprepare(ctx context.Context, uid types.UID) error {
	if err := p.waitPools(ctx); err != nil {
		return err
	}
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	if err := p.reload(); err != nil {
		return err
	}
	rec, ok := p.Checkpoint.Get(uid)
	if !ok {
		var err error
		if rec, err = p.listed(ctx, uid); err != nil {
			return err
		}
	}
	if err := p.release(ctx, uid, rec); err != nil {
		return err
	}
	return p.CDI.RemoveFile(SpecFile(uid))
}

// listed is a record of what the DRA drop-ins' plugins hold for claim
// uid, by their LIST; the pools are set (waitPools).
func (p *Preparer) listed(ctx context.Context, uid types.UID) (Claim, error) {
	var rec Claim
	for _, d := range p.dropIns() {
		l, err := d.plugin.Plugin.List(ctx)
		if err != nil {
			return Claim{}, fmt.Errorf("LIST of drop-in %s: %w", d.file, err)
		}
		for _, a := range l.Allocations {
			if claimOf(a.RequestID) == uid {
				rec.Devices = append(rec.Devices, PreparedDevice{Pool: d.plugin.Name, RequestID: a.RequestID})
			}
		}
	}
	return rec, nil
}

// release DELs rec's request-ids and forgets claim uid.
func (p *Preparer) release(ctx context.Context, uid types.UID, rec Claim) error {
	if err := p.delAll(ctx, uid, rec); err != nil {
		return err
	}
	if _, ok := p.Checkpoint.Get(uid); !ok {
		return nil
	}
	return p.Checkpoint.Delete(uid)
}

// delAll DELs the request-ids of rec, a record of claim uid or a part of
// one; an unknown request-id is no error.
func (p *Preparer) delAll(ctx context.Context, uid types.UID, rec Claim) error {
	var errs []error
	for _, d := range rec.Devices {
		if d.AdminAccess {
			continue
		}
		pl, ok, err := p.pool(d.Pool)
		if err != nil {
			return err
		}
		if !ok {
			p.log().Warn("cannot DEL: the pool is no longer served", "claim", uid, "pool", d.Pool, "requestId", d.RequestID)
			continue
		}
		var e *spec.Error
		if err := pl.Plugin.Del(ctx, d.RequestID); err != nil && !(errors.As(err, &e) && e.Code == spec.CodeUnknownRequestID) {
			errs = append(errs, fmt.Errorf("DEL of %s (device %s of pool %s): %w", d.RequestID, d.ID, d.Pool, err))
		}
	}
	return errors.Join(errs...)
}

// RestoreSpecs writes the CDI spec file of every claim the checkpoint
// holds as prepared: the spec directory (/var/run/cdi) is often a tmpfs,
// emptied by a reboot that the checkpoint survives, and the kubelet does
// not prepare a claim again for a container it restarts.
func (p *Preparer) RestoreSpecs() error {
	var errs []error
	for _, uid := range p.Checkpoint.UIDs() {
		rec, _ := p.Checkpoint.Get(uid)
		if !rec.Prepared() {
			continue
		}
		if s := p.claimSpec(rec); len(s.Devices) > 0 {
			errs = append(errs, p.CDI.WriteFile(SpecFile(uid), s))
		}
	}
	return errors.Join(errs...)
}

func (p *Preparer) log() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Logger
}

// Holds says whether a prepared claim holds pool's device dev: discovery
// keeps such a device when it vanishes (discovery.Discoverer.Keep), so
// that the claim's Unprepare still finds its pool and DELs it, and the
// device, when it comes back, is not published free while the plugin
// still holds it.
//
// With PluginDir, a claim the other bridge of a rolling update prepared
// since this one last read the checkpoint holds its devices too
// (knownClaims).
func (p *Preparer) Holds(pool string, dev spec.DeviceInfo) bool {
	return holds(p.knownClaims(), pool, dev)
}

// knownClaims is the prepared claims' records: the checkpoint's in
// memory and, with PluginDir, those of the file as it is that memory
// lacks, which the other bridge of a rolling update prepared since this
// one last read it. The file is read without the lock of the calls, for
// a write replaces it whole; one that cannot be read adds nothing.
func (p *Preparer) knownClaims() map[types.UID]Claim {
	claims := map[types.UID]Claim{}
	for _, uid := range p.Checkpoint.UIDs() {
		claims[uid], _ = p.Checkpoint.Get(uid)
	}
	if p.PluginDir == "" {
		return claims
	}
	if f, err := readCheckpoint(p.Checkpoint.path); err == nil {
		for uid, rec := range f.Claims {
			if _, ok := claims[uid]; !ok {
				claims[uid] = rec
			}
		}
	}
	return claims
}

// holds says whether a record of claims holds pool's device dev.
func holds(claims map[types.UID]Claim, pool string, dev spec.DeviceInfo) bool {
	for _, rec := range claims {
		for _, d := range rec.Devices {
			if d.Pool == pool && d.ID == dev.ID && !d.AdminAccess {
				return true
			}
		}
	}
	return false
}

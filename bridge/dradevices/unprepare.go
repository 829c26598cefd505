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
// its CDI spec file and forgets it. A claim not recorded has nothing left
// to release (its spec file is removed all the same). A DEL that fails
// keeps the claim recorded and is the error: the kubelet asks again. The
// DEL of a device whose pool is no longer served (its drop-in was removed)
// cannot run and is skipped with a warning: the plugin's state keeps that
// allocation until the plugin's GC is run.
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
	if ok {
		if err := p.release(ctx, uid, rec); err != nil {
			return err
		}
	}
	return p.CDI.RemoveFile(SpecFile(uid))
}

// release DELs rec's request-ids and forgets claim uid.
func (p *Preparer) release(ctx context.Context, uid types.UID, rec Claim) error {
	var errs []error
	for _, d := range rec.Devices {
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
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return p.Checkpoint.Delete(uid)
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

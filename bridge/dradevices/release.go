package dradevices

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/dra"
)

// GetClaim reads a claim from the API server, as
// ResourceClaims(namespace).Get does.
type GetClaim func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

// ReleaseGone is the start-up's cleanup, once the pools are set: every
// claim of the checkpoint that the API server no longer has (deleted, or
// replaced by one of the same name, or no longer allocated) is
// unprepared, since the kubelet may never ask for it; then each drop-in
// served through DRA is GC'd with the request-ids the checkpoint still
// holds as the valid ones, which releases what the plugin holds for no
// claim: allocations made before the drop-in moved from the device
// plugins to DRA, or by another caller. A claim the API server cannot be
// asked about is kept. It runs under the lock of Prepare and Unprepare,
// so that no ADD runs between the checkpoint's read and the GC; with
// PluginDir set, under the library's lock of the calls too, after which
// it reads the checkpoint anew: the other bridge of a rolling update may
// have prepared claims since this one started, and its ADDs must not be
// taken for leftovers.
func (p *Preparer) ReleaseGone(ctx context.Context, get GetClaim) error {
	if p.PluginDir != "" {
		unlock, err := dra.LockCalls(p.PluginDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	if err := p.reload(); err != nil {
		return err
	}
	var errs []error
	for _, uid := range p.Checkpoint.UIDs() {
		rec, _ := p.Checkpoint.Get(uid)
		gone, err := claimGone(ctx, get, uid, rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !gone {
			continue
		}
		p.log().Info("releasing a claim prepared before that the API server no longer has", "claim", rec.Namespace+"/"+rec.Name, "uid", uid)
		if err := p.release(ctx, uid, rec); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, p.CDI.RemoveFile(SpecFile(uid)))
	}
	return errors.Join(append(errs, p.gcDropIns(ctx))...)
}

// claimGone says whether rec, checkpointed as uid, is no longer a claim
// allocated in the API server.
func claimGone(ctx context.Context, get GetClaim, uid types.UID, rec Claim) (bool, error) {
	c, err := get(ctx, rec.Namespace, rec.Name)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("claim %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	return c.UID != uid || c.Status.Allocation == nil, nil
}

// gcDropIns runs GC on the plugin of every drop-in whose pools are set,
// with the checkpoint's request-ids of those pools as the valid ones.
func (p *Preparer) gcDropIns(ctx context.Context) error {
	p.mu.Lock()
	byDropIn := map[string][]string{} // drop-in file -> its pools
	plugins := map[string]string{}    // drop-in file -> a pool of it, for its plugin
	for name, pl := range p.pools {
		byDropIn[pl.Conf.Path] = append(byDropIn[pl.Conf.Path], name)
		plugins[pl.Conf.Path] = name
	}
	p.mu.Unlock()
	var errs []error
	for dropIn, pools := range byDropIn {
		in := map[string]bool{}
		for _, name := range pools {
			in[name] = true
		}
		valid := []string{}
		for _, uid := range p.Checkpoint.UIDs() {
			rec, _ := p.Checkpoint.Get(uid)
			for _, d := range rec.Devices {
				if in[d.Pool] {
					valid = append(valid, d.RequestID)
				}
			}
		}
		pl, ok, err := p.pool(plugins[dropIn])
		if err != nil || !ok {
			continue
		}
		r, err := pl.Plugin.GC(ctx, valid)
		if err != nil {
			errs = append(errs, fmt.Errorf("GC of drop-in %s: %w", dropIn, err))
			continue
		}
		if len(r.Released) > 0 {
			p.log().Info("released allocations of no prepared claim", "dropIn", dropIn, "requestIds", r.Released)
		}
	}
	return errors.Join(errs...)
}

package dradevices

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// What an observer is told a call was.
const (
	OpPrepare   = "prepare"
	OpUnprepare = "unprepare"
	// PoolUnknown is the pool of a claim whose pools the preparer cannot
	// tell: allocated from another node's, or unprepared unrecorded.
	PoolUnknown = "unknown"
)

// Observed is p as dra.Devices, telling onClaim of every Prepare and
// Unprepare: which (OpPrepare, OpUnprepare), for each bridge pool of the
// claim's devices (a claim of two pools is told twice), how long the call
// took and, when it failed, why (Reason; "" when it did not).
func Observed(p *Preparer, onClaim func(op, pool, reason string, took time.Duration)) dra.Devices {
	return observed{p: p, onClaim: onClaim}
}

type observed struct {
	p       *Preparer
	onClaim func(op, pool, reason string, took time.Duration)
}

func (o observed) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]dra.Device, error) {
	start := time.Now()
	devs, err := o.p.Prepare(ctx, claim)
	o.tell(OpPrepare, o.p.claimPools(claim), start, err)
	return devs, err
}

func (o observed) Unprepare(ctx context.Context, uid types.UID) error {
	start := time.Now()
	var pools []string
	if rec, ok := o.p.Checkpoint.Get(uid); ok {
		pools = recordPools(rec)
	}
	err := o.p.Unprepare(ctx, uid)
	o.tell(OpUnprepare, pools, start, err)
	return err
}

func (o observed) tell(op string, pools []string, start time.Time, err error) {
	took := time.Since(start)
	if len(pools) == 0 {
		pools = []string{PoolUnknown}
	}
	for _, pool := range pools {
		o.onClaim(op, pool, Reason(err), took)
	}
}

// claimPools is the bridge pools of claim's results of this driver.
func (p *Preparer) claimPools(claim *resourceapi.ResourceClaim) []string {
	var out []string
	if claim.Status.Allocation == nil {
		return nil
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.Driver {
			continue
		}
		pool, _, err := p.poolOf(r.Pool)
		if err != nil {
			pool = PoolUnknown
		}
		if !slices.Contains(out, pool) {
			out = append(out, pool)
		}
	}
	return out
}

func recordPools(rec Claim) []string {
	var out []string
	for _, d := range rec.Devices {
		if !slices.Contains(out, d.Pool) {
			out = append(out, d.Pool)
		}
	}
	return out
}

// Reason is why a Prepare or Unprepare failed, in a few words that a
// metric's label can hold: not-discovered (before the first discovery),
// not-allocatable (a device this node does not serve), plugin-timeout,
// plugin-not-run, plugin-bad-output, plugin-code-<n> (the plugin's error
// document; n of SPEC.md's codes, "other" for a plugin's own),
// file-system (the checkpoint or a CDI spec), canceled, or other; ""
// for no error.
func Reason(err error) string {
	var se *spec.Error
	var pathErr *fs.PathError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNotReady):
		return "not-discovered"
	case errors.Is(err, ErrNotAllocatable):
		return "not-allocatable"
	case errors.Is(err, invoke.ErrTimeout):
		return "plugin-timeout"
	case errors.Is(err, invoke.ErrNotFound), errors.Is(err, invoke.ErrExec):
		return "plugin-not-run"
	case errors.Is(err, invoke.ErrBadOutput), errors.Is(err, invoke.ErrIncompatible):
		return "plugin-bad-output"
	case errors.As(err, &se) && se.Code < spec.CodePluginMin:
		return fmt.Sprintf("plugin-code-%d", se.Code)
	case se != nil:
		return "plugin-code-other"
	case errors.As(err, &pathErr):
		return "file-system"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "other"
}

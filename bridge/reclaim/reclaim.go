package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/logrepeat"
	"github.com/cdiexec/cdi/spec"
)

// DefaultGrace is how long a claimed slot may go unheld before it is
// released.
const DefaultGrace = 5 * time.Minute

// Plugins undoes allocations on this node's plugins. The request-id of a
// slot's allocation is the slot id.
type Plugins interface {
	// Del releases one allocation of pool's plugin; it returns nil when
	// the pool is no longer served here, as nothing is left to release.
	Del(ctx context.Context, pool, requestID string) error
	// GC releases every allocation outside valid of the plugin (one
	// drop-in, one state) that serves pools.
	GC(ctx context.Context, pools []string, valid []string) error
	// Pools names the pools this node serves, grouped by the drop-in that
	// serves them: the pools of one drop-in (a generic plugin's groups)
	// share its state, so GC must be told the valid slots of all of them
	// at once, or it would release the others'.
	Pools() [][]string
}

// Reclaimer releases the slots this node claims that no container holds.
type Reclaimer struct {
	Lister  Lister
	Store   instance.Store
	Plugins Plugins
	Node    string
	// Domain is the resource domain: only <domain>/... resources count.
	Domain string
	// Tracker decides when a slot is due; NewTracker(DefaultGrace) if nil.
	Tracker *Tracker
	// Lock, if set, is held for each pass. The node's Allocate holds it
	// shared, so that no slot is claimed or set up while a pass decides
	// what is unused and releases it.
	Lock   sync.Locker
	Now    func() time.Time
	Logger *slog.Logger
}

// Run reclaims every period until ctx ends. Errors are logged, the same
// one again only every logrepeat.DefaultEvery (the kubelet may be down
// for long): the next pass tries again.
func (r *Reclaimer) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var failure logrepeat.Failure
	for {
		err := r.Once(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			failure.Failed(r.log(), "slot reclaim failed; retrying every period", err, "period", period)
		default:
			failure.Succeeded(r.log(), "slot reclaim works again")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once makes one pass: it releases the slots that are due and runs GC on
// every drop-in's plugin with the slots this node still claims there.
func (r *Reclaimer) Once(ctx context.Context) error {
	if r.Tracker == nil {
		r.Tracker = NewTracker(DefaultGrace)
	}
	if r.Lock != nil {
		r.Lock.Lock()
		defer r.Lock.Unlock()
	}
	held, err := ListHeld(ctx, r.Lister, r.Domain)
	if err != nil {
		return err
	}
	all, err := r.Store.List(ctx)
	lacking := instance.Lacking(err)
	if err != nil && lacking == nil {
		return fmt.Errorf("reading the instance store: %w", err)
	}
	var errs []error
	if err != nil {
		// A partial list: the other pools are reclaimed, these wait.
		errs = append(errs, fmt.Errorf("reading the instance store, the drop-ins of the pools it lacks are not told what stays valid: %w", err))
	}
	claimed := Claimed(all, r.Node, r.Domain)
	released := map[instance.Claim]bool{}
	for _, s := range r.Tracker.Due(r.now(), claimed, held) {
		if err := r.release(ctx, s); err != nil {
			errs = append(errs, err)
			continue
		}
		released[s.Claim] = true
	}
	errs = append(errs, r.gc(ctx, claimed, released, lacking))
	return errors.Join(errs...)
}

// release runs DEL for the slot, then frees it in the store. A DEL that
// fails keeps the claim, so that the store never offers a device the
// plugin still hands out; the next pass tries again.
func (r *Reclaimer) release(ctx context.Context, s Slot) error {
	err := r.Plugins.Del(ctx, s.Pool, s.Claim.Slot)
	if err != nil && spec.CodeOf(err) != spec.CodeUnknownRequestID {
		return fmt.Errorf("releasing %s: DEL: %w", s.Claim.Slot, err)
	}
	if err := r.Store.Release(ctx, []instance.Claim{s.Claim}); err != nil {
		return fmt.Errorf("releasing %s: %w", s.Claim.Slot, err)
	}
	r.log().Info("released a slot no container holds", "slot", s.Claim.Slot, "usage", s.Claim.Value,
		"resource", s.Resource, "device", s.DeviceID)
	return nil
}

// gc tells each drop-in's plugin which request-ids (slot ids) this node
// still claims in its pools, cleaning what a lost DEL left behind; not
// that of a drop-in one of whose pools the store's list lacks, which
// cannot be told.
func (r *Reclaimer) gc(ctx context.Context, claimed []Slot, released map[instance.Claim]bool, lacking map[string]bool) error {
	groups := r.Plugins.Pools()
	group := map[string]int{} // pool to its index in groups
	valid := make([][]string, len(groups))
	for i, pools := range groups {
		valid[i] = []string{}
		for _, p := range pools {
			group[p] = i
		}
	}
	for _, s := range claimed {
		if i, ok := group[s.Pool]; ok && !released[s.Claim] {
			valid[i] = append(valid[i], s.Claim.Slot)
		}
	}
	var errs []error
	for i, pools := range groups {
		if slices.ContainsFunc(pools, func(p string) bool { return lacking[p] }) {
			continue
		}
		sort.Strings(valid[i])
		if err := r.Plugins.GC(ctx, pools, valid[i]); err != nil {
			errs = append(errs, fmt.Errorf("GC of pools %v: %w", pools, err))
		}
	}
	return errors.Join(errs...)
}

func (r *Reclaimer) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func (r *Reclaimer) log() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

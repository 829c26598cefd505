package reclaim

import (
	"cmp"
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
	// List lists the allocations of the plugin that serves pools.
	List(ctx context.Context, pools []string) ([]spec.Allocation, error)
	// HeldElsewhere is told, after each pass, the devices of pools (by
	// inventory id) that allocations not of this node's slots hold: they
	// are not free, and are not offered.
	HeldElsewhere(pools []string, devices map[string]bool)
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
	Lock sync.Locker
	// OthersHeld, if set, says whether a container holds the allocation
	// requestID that another front end made (a DRA claim's, by the CDI
	// names of pods): such an allocation in a drop-in of this node's is
	// kept, and its device not offered, until no container has held it
	// for the grace. Without it only the grace keeps one.
	OthersHeld func(pods *Pods, requestID string) bool
	// PodEnded, if set, asks the API server whether a pod
	// (<namespace>/<name>) has ended: deleted, or done (Succeeded,
	// Failed). Run asks it of a pod that held a slot of this node when
	// the kubelet stops listing it, between passes, every HolderEvery;
	// a pod that ended frees its slots at once (PodEnded). Without it
	// only the grace frees them.
	PodEnded func(ctx context.Context, pod string) (bool, error)
	// HolderEvery is how often Run asks the kubelet whether the pods
	// holding slots still run; DefaultHolderEvery if zero.
	HolderEvery time.Duration
	Now         func() time.Time
	Logger      *slog.Logger

	// foreign is each drop-in's Foreign, by its first pool.
	foreign map[string]*Foreign
	// podFailure logs PodEnded's errors, the same one again only now
	// and then.
	podFailure logrepeat.Failure
}

// DefaultHolderEvery is how often Run asks the kubelet, by default,
// whether the pods holding slots still run: a List of the node's pods
// from a local socket, and an API read only for a pod that is no longer
// listed.
const DefaultHolderEvery = 2 * time.Second

// Run reclaims every period, and at once when a pod that held slots has
// ended (askHolders, every HolderEvery), until ctx ends. Errors are
// logged, the same one again only every logrepeat.DefaultEvery (the
// kubelet may be down for long): the next pass tries again.
func (r *Reclaimer) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var holders <-chan time.Time
	if r.PodEnded != nil {
		h := time.NewTicker(cmp.Or(r.HolderEvery, DefaultHolderEvery))
		defer h.Stop()
		holders = h.C
	}
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
		if !r.wait(ctx, t.C, holders) {
			return
		}
	}
}

// wait returns when a pass is due (the period, a pod that held slots
// found ended) or false once ctx ends.
func (r *Reclaimer) wait(ctx context.Context, period, holders <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-period:
			return true
		case <-holders:
			if r.askHolders(ctx) {
				return true
			}
		}
	}
}

// holdersRound bounds one round of askHolders: an API server that is
// slow or away delays a pass by this much at most; the pods not asked
// are asked next round.
const holdersRound = 5 * time.Second

// askHolders lists the kubelet's pods and asks the API server whether
// each pod that held slots of this node and that the kubelet no longer
// lists has ended; the slots of one that has are marked for the next
// pass, which Run starts at once (true). A pod the API server says still
// runs (the kubelet restarting, not listing it for a while) frees
// nothing before the grace. Run's goroutine alone calls it, as it does
// Once: the Tracker is theirs.
func (r *Reclaimer) askHolders(ctx context.Context) bool {
	pods, err := ListPods(ctx, r.Lister, r.Domain)
	if err != nil {
		return false // the next pass reports it
	}
	ctx, cancel := context.WithTimeout(ctx, holdersRound)
	defer cancel()
	marked := false
	for _, pod := range r.Tracker.unlistedHolders(pods.Running) {
		if ctx.Err() != nil {
			break
		}
		gone, err := r.PodEnded(ctx, pod)
		if err != nil {
			r.podFailure.Failed(r.log(), "asking the API server whether a pod that held slots has ended; its slots wait for the grace", err, "pod", pod)
			continue
		}
		r.podFailure.Succeeded(r.log(), "asking the API server of pods that held slots works again")
		if gone && r.Tracker.holderEnded(pod) > 0 {
			r.log().Info("a pod that held slots has ended; releasing them", "pod", pod)
			marked = true
		}
	}
	return marked
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
	pods, err := ListPods(ctx, r.Lister, r.Domain)
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
	for _, s := range r.Tracker.Due(r.now(), claimed, pods) {
		if err := r.release(ctx, s); err != nil {
			errs = append(errs, err)
			continue
		}
		released[s.Claim] = true
		r.Tracker.Released(s.Claim)
	}
	errs = append(errs, r.gc(ctx, pods, claimed, released, lacking))
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
// cannot be told. The plugin's other allocations (another front end's,
// another caller's) are kept while a container holds them and for the
// grace after (Foreign), and their devices are told to the node as held
// elsewhere. A drop-in whose plugin cannot LIST is not collected.
func (r *Reclaimer) gc(ctx context.Context, pods *Pods, claimed []Slot, released map[instance.Claim]bool, lacking map[string]bool) error {
	groups := r.Plugins.Pools()
	group := map[string]int{} // pool to its index in groups
	own := make([]map[string]bool, len(groups))
	for i, pools := range groups {
		own[i] = map[string]bool{}
		for _, p := range pools {
			group[p] = i
		}
	}
	for _, s := range claimed {
		if i, ok := group[s.Pool]; ok && !released[s.Claim] {
			own[i][s.Claim.Slot] = true
		}
	}
	var errs []error
	for i, pools := range groups {
		if slices.ContainsFunc(pools, func(p string) bool { return lacking[p] }) {
			continue
		}
		if err := r.gcGroup(ctx, pods, pools, own[i]); err != nil {
			errs = append(errs, fmt.Errorf("GC of pools %v: %w", pools, err))
		}
	}
	return errors.Join(errs...)
}

// gcGroup collects the plugin of pools, of which own are this node's
// slots.
func (r *Reclaimer) gcGroup(ctx context.Context, pods *Pods, pools []string, own map[string]bool) error {
	allocs, err := r.Plugins.List(ctx, pools)
	if err != nil {
		return err
	}
	held := func(id string) bool { return r.OthersHeld != nil && r.OthersHeld(pods, id) }
	keep, release := r.foreignOf(pools).Sort(r.now(), allocs, func(id string) bool { return own[id] }, held)
	valid := []string{}
	for id := range own {
		valid = append(valid, id)
	}
	for _, a := range keep {
		valid = append(valid, a.RequestID)
	}
	sort.Strings(valid)
	if err := r.Plugins.GC(ctx, pools, valid); err != nil {
		return err
	}
	r.Plugins.HeldElsewhere(pools, Devices(keep))
	for _, a := range release {
		r.log().Info("released an allocation of no slot of this node that no container holds", "pools", pools, "requestId", a.RequestID)
	}
	return nil
}

// foreignOf is the Foreign of the drop-in of pools.
func (r *Reclaimer) foreignOf(pools []string) *Foreign {
	if r.foreign == nil {
		r.foreign = map[string]*Foreign{}
	}
	f, ok := r.foreign[pools[0]]
	if !ok {
		f = &Foreign{Grace: r.Tracker.grace}
		r.foreign[pools[0]] = f
	}
	return f
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

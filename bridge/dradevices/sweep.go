package dradevices

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
)

// collect looks after what the DRA drop-ins' plugins hold and what the
// checkpoint records, pods being what the kubelet's containers hold
// (Rebuild, Sweep). The kubelet unprepares the claims of its pods, and
// only those: a claim of no pod it runs is unprepared by no one.
//
//   - A recorded claim stays while the kubelet names it (PodResources
//     lists it for a container, or a container holds its CDI name). One
//     it has not named since the sweep before and for the grace, which
//     bridges a kubelet restart, is unprepared unless the API server
//     says it is in use here (inUse: a pod's init container may be its
//     only user, which PodResources does not list); such a one is looked
//     at again after another grace.
//   - An allocation no record names (a claim's ADD whose record was lost
//     and which Rebuild found in use by no pod, another caller's) stays
//     while the kubelet names its claim or a container holds it, and for
//     the grace after; then it is DELed.
//   - A device plugins' slot of a DRA pool (the pool moved to DRA under
//     running pods) stays while a container may hold it and for the
//     grace after (reclaim.Foreign); then it is DELed. A slot of another
//     pool whose drop-in shares the plugin's state is the device
//     plugins' to release, never this.
//
// The devices of the allocations that stay and no record names are told
// as held elsewhere, to leave out of the slices (Withheld). A drop-in
// that cannot LIST keeps what it held.
func (p *Preparer) collect(ctx context.Context, pods *reclaim.Pods, inUse ClaimsInUse) error {
	now := time.Now()
	named := p.namedClaims(pods)
	errs := []error{p.releaseUnnamed(ctx, now, named, inUse)}
	p.mu.Lock()
	elsewhere := maps.Clone(p.heldElsewhere)
	p.mu.Unlock()
	if elsewhere == nil {
		elsewhere = map[string]map[string]bool{}
	}
	slotPools := map[string]bool{}
	for _, d := range p.dropIns() {
		l, err := d.plugin.Plugin.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("LIST of drop-in %s: %w", d.file, err))
			continue
		}
		slotsKept, slotsGone := p.trackerOf(&p.slots, d.file).Sort(now, l.Allocations,
			func(id string) bool { return !p.isSlot(id) }, func(id string) bool { return p.slotHeld(pods, id) })
		leftKept, leftGone := p.trackerOf(&p.leftovers, d.file).Sort(now, l.Allocations,
			func(id string) bool { return anySlot(id) || p.recorded(id) },
			func(id string) bool { return named[claimOf(id)] || containerHolds(pods, id) })
		errs = append(errs, p.delAllocs(ctx, d, slotsGone, "released a device plugins' slot of a DRA pool that no container holds"),
			p.delAllocs(ctx, d, leftGone, "released an allocation of a DRA pool that no record and no pod of the kubelet's names"))
		kept := slices.Concat(slotsKept, leftKept, p.otherSlots(l.Allocations))
		for _, name := range d.pools {
			elsewhere[name] = reclaim.Devices(kept)
		}
		for _, a := range slotsKept {
			pool, _, _ := p.slotOf(a.RequestID)
			slotPools[pool] = true
		}
	}
	p.mu.Lock()
	p.heldElsewhere, p.slotPools = elsewhere, slotPools
	p.mu.Unlock()
	return errors.Join(errs...)
}

// SlotPools is the DRA pools in which device plugins' slots are kept (a
// container holds one, or did within the grace: the pool moved to DRA
// under running pods), as of the last Rebuild or Sweep: the CDI spec
// files naming their devices, which those containers' Allocate answers
// name and the kubelet hands the runtime at every restart of theirs, are
// still needed.
func (p *Preparer) SlotPools() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.slotPools)
}

// otherSlots is the device plugins' slots of allocs of pools not served
// through DRA here: another drop-in's, which shares the plugin's state.
func (p *Preparer) otherSlots(allocs []spec.Allocation) []spec.Allocation {
	var out []spec.Allocation
	for _, a := range allocs {
		if anySlot(a.RequestID) && !p.isSlot(a.RequestID) {
			out = append(out, a)
		}
	}
	return out
}

// containerHolds says whether a container holds requestID as a device of
// one of the device plugins' resources.
func containerHolds(pods *reclaim.Pods, requestID string) bool {
	for _, ids := range pods.Devices {
		if ids[requestID] {
			return true
		}
	}
	return false
}

// namedClaims is the UIDs of the claims the kubelet names: the recorded
// claims whose namespace and name it lists, and the claims of the CDI
// names its containers hold.
func (p *Preparer) namedClaims(pods *reclaim.Pods) map[types.UID]bool {
	named := map[types.UID]bool{}
	for _, uid := range p.Checkpoint.UIDs() {
		if rec, _ := p.Checkpoint.Get(uid); pods.Claims[rec.Namespace+"/"+rec.Name] {
			named[uid] = true
		}
	}
	prefix := cdispec.ClaimDevice(p.Vendor, "")
	for name := range pods.CDIDevices {
		if id, ok := strings.CutPrefix(name, prefix); ok {
			named[claimOf(id)] = true
		}
	}
	return named
}

// releaseUnnamed unprepares each recorded claim the kubelet has not
// named (named) since the sweep before and for the grace, as of now,
// and that inUse does not say is in use here. The first sweep that finds
// a claim unnamed never releases it: the kubelet was asked before the
// sweep took the lock, and a claim prepared in between is not named yet.
func (p *Preparer) releaseUnnamed(ctx context.Context, now time.Time, named map[types.UID]bool, inUse ClaimsInUse) error {
	if p.unnamed == nil {
		p.unnamed = map[types.UID]time.Time{}
	}
	for uid := range p.unnamed {
		if named[uid] || !p.isRecorded(uid) {
			delete(p.unnamed, uid)
		}
	}
	var due []types.UID
	for _, uid := range p.Checkpoint.UIDs() {
		since, seen := p.unnamed[uid]
		switch {
		case named[uid]:
		case !seen:
			p.unnamed[uid] = now
		case now.Sub(since) >= p.Grace:
			due = append(due, uid)
		}
	}
	if len(due) == 0 {
		return nil
	}
	used := map[types.UID]bool{}
	if inUse != nil {
		var err error
		if used, err = inUse(ctx); err != nil {
			return fmt.Errorf("asking the API server whether the prepared claims the kubelet does not name are in use: %w", err)
		}
	}
	var errs []error
	for _, uid := range due {
		rec, _ := p.Checkpoint.Get(uid)
		if used[uid] {
			p.unnamed[uid] = now
			continue
		}
		p.log().Info("releasing a prepared claim that no pod of the kubelet's uses", "claim", rec.Namespace+"/"+rec.Name, "uid", uid,
			"grace", p.Grace)
		if err := p.unprepare(ctx, uid, rec); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", rec.Namespace, rec.Name, err))
			continue
		}
		delete(p.unnamed, uid)
	}
	return errors.Join(errs...)
}

// isRecorded says whether the checkpoint records claim uid.
func (p *Preparer) isRecorded(uid types.UID) bool {
	_, ok := p.Checkpoint.Get(uid)
	return ok
}

// recorded says whether the checkpoint records requestID.
func (p *Preparer) recorded(requestID string) bool {
	rec, ok := p.Checkpoint.Get(claimOf(requestID))
	if !ok {
		return false
	}
	for _, d := range rec.Devices {
		if d.RequestID == requestID {
			return true
		}
	}
	return false
}

// delAllocs DELs allocs in drop-in d, logging each with what.
func (p *Preparer) delAllocs(ctx context.Context, d dropIn, allocs []spec.Allocation, what string) error {
	var errs []error
	for _, a := range allocs {
		if err := d.plugin.Plugin.Del(ctx, a.RequestID); err != nil && spec.CodeOf(err) != spec.CodeUnknownRequestID {
			errs = append(errs, fmt.Errorf("DEL of %s in drop-in %s: %w", a.RequestID, d.file, err))
			continue
		}
		p.log().Info(what, "dropIn", d.file, "requestId", a.RequestID)
	}
	return errors.Join(errs...)
}

// trackerOf is the reclaim.Foreign of drop-in file in trackers, made if
// need be; claimMu's.
func (p *Preparer) trackerOf(trackers *map[string]*reclaim.Foreign, file string) *reclaim.Foreign {
	if *trackers == nil {
		*trackers = map[string]*reclaim.Foreign{}
	}
	f, ok := (*trackers)[file]
	if !ok {
		f = &reclaim.Foreign{}
		(*trackers)[file] = f
	}
	f.Grace = p.Grace
	return f
}

// Withheld is, by pool, the devices that allocations no record names
// hold, the device plugins' among them (Rebuild, Sweep): the slices leave
// them out until they are released (Resources).
func (p *Preparer) Withheld() map[string]map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]map[string]bool, len(p.heldElsewhere))
	for pool, held := range p.heldElsewhere {
		out[pool] = maps.Clone(held)
	}
	return out
}

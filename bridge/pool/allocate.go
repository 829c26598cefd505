package pool

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Allocate maps the vdevs of each container request of one Allocate call
// to slots, and returns the claims per container request, in request
// order. A vdev this node already claims keeps its slot (the claim is
// returned again, so the caller can repeat it idempotently); a new vdev
// takes the lowest free slot of the usable instance with the most free
// slots that this container request does not use yet, ties going to the
// instance name, or for shared instances to an order of the node's own
// (tieKey). Slots taken by earlier container requests of the call
// are not free for later ones. When a request cannot be met the whole call
// fails with an error wrapping ErrUnavailable, and nothing is claimed.
func (p *Pool) Allocate(requests [][]string) ([][]instance.Claim, error) {
	a := newAllocation(p)
	out := make([][]instance.Claim, len(requests))
	for i, vdevs := range requests {
		claims, err := a.container(vdevs)
		if err != nil {
			return nil, fmt.Errorf("container request %d (%s): %w", i, describe(vdevs), err)
		}
		out[i] = claims
	}
	return out, nil
}

// allocation is the state of one Allocate call: free slots left per
// instance, and the vdevs mapped so far.
type allocation struct {
	p       *Pool
	free    map[string][]string // instance -> free slots, lowest first
	byName  map[string]*instance.Instance
	mapped  map[string]slotRef // vdev -> slot, claimed before or in this call
	ordered []*instance.Instance
}

func newAllocation(p *Pool) *allocation {
	a := &allocation{p: p, free: map[string][]string{}, byName: map[string]*instance.Instance{}, mapped: p.claimed()}
	for i := range p.Instances {
		in := &p.Instances[i]
		a.byName[in.Name] = in
		a.ordered = append(a.ordered, in)
		if !p.usable(in) {
			continue
		}
		for _, s := range in.Slots() {
			if in.Usage[s] == "" {
				a.free[in.Name] = append(a.free[in.Name], s)
			}
		}
	}
	sort.Slice(a.ordered, func(i, j int) bool {
		ki, kj := tieKey(p.Node, a.ordered[i]), tieKey(p.Node, a.ordered[j])
		return ki < kj || ki == kj && a.ordered[i].Name < a.ordered[j].Name
	})
	return a
}

// tieKey orders instances with equally many free slots: by name, except
// that a shared instance, which other nodes claim too, comes in an order
// of each node's own (a hash of node and name), so that nodes racing for
// equally good devices rarely pick the same one.
func tieKey(node string, in *instance.Instance) uint64 {
	if !in.Shared {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(in.Name))
	return h.Sum64()
}

// container maps the vdevs of one container request: known vdevs first,
// so that the instances they pin are excluded for the new ones.
func (a *allocation) container(vdevs []string) ([]instance.Claim, error) {
	used := map[string]bool{}
	refs := make([]slotRef, len(vdevs))
	seen := map[string]bool{}
	for i, v := range vdevs {
		if seen[v] {
			return nil, fmt.Errorf("%w: vdev %q requested twice", ErrUnavailable, v)
		}
		seen[v] = true
		ref, known := a.mapped[v]
		if !known {
			continue
		}
		if used[ref.instance] {
			return nil, fmt.Errorf("%w: vdevs of this request share instance %s", ErrUnavailable, ref.instance)
		}
		used[ref.instance], refs[i] = true, ref
	}
	for i, v := range vdevs {
		if refs[i] != (slotRef{}) {
			continue
		}
		ref, err := a.take(used)
		if err != nil {
			return nil, err
		}
		used[ref.instance], refs[i], a.mapped[v] = true, ref, ref
	}
	claims := make([]instance.Claim, len(vdevs))
	for i, v := range vdevs {
		claims[i] = instance.Claim{Instance: refs[i].instance, Slot: refs[i].slot, Value: instance.ConfigurationLevelUsage(v, a.p.Node)}
	}
	return claims, nil
}

// take removes and returns the lowest free slot of the instance with the
// most free slots among those not used by the request.
func (a *allocation) take(used map[string]bool) (slotRef, error) {
	var best *instance.Instance
	for _, in := range a.ordered {
		if used[in.Name] || len(a.free[in.Name]) == 0 {
			continue
		}
		if best == nil || len(a.free[in.Name]) > len(a.free[best.Name]) {
			best = in
		}
	}
	if best == nil {
		return slotRef{}, fmt.Errorf("%w: every usable instance with a free slot is already used by this request", ErrUnavailable)
	}
	slot := a.free[best.Name][0]
	a.free[best.Name] = a.free[best.Name][1:]
	return slotRef{instance: best.Name, slot: slot}, nil
}

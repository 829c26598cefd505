package instance

import (
	"fmt"
	"slices"
)

// The rules every Store applies to one Instance, kept here so that stores
// differ only in how they keep records, never in what a change means.

// Observe records that node sees the device described by seen (Config,
// DeviceID, Shared, Capacity, Properties) and resizes the slots to the
// capacity seen. It reports whether anything changed.
func (in *Instance) Observe(node string, seen Instance) bool {
	before := in.fingerprint()
	in.Describe(seen)
	if !in.Sees(node) {
		in.Nodes = append(in.Nodes, node)
		slices.Sort(in.Nodes)
	}
	return in.fingerprint() != before
}

// Describe is Observe without a node: it sets what seen says of the
// device (Config, DeviceID, Shared, Capacity, Properties) and resizes
// the slots, for a store that records who sees a device elsewhere. It
// reports whether anything changed.
func (in *Instance) Describe(seen Instance) bool {
	before := in.fingerprint()
	if in.Usage == nil {
		in.Usage = map[string]string{}
	}
	in.Config, in.DeviceID, in.Shared, in.Capacity = seen.Config, seen.DeviceID, seen.Shared, seen.Capacity
	in.Properties = seen.Properties
	in.resize()
	return in.fingerprint() != before
}

// Held reports whether a slot of the Instance is in use.
func (in *Instance) Held() bool {
	for _, v := range in.Usage {
		if v != "" {
			return true
		}
	}
	return false
}

// Forget records that node no longer sees the device. It reports whether
// node was among the Instance's nodes.
func (in *Instance) Forget(node string) bool {
	n := len(in.Nodes)
	in.Nodes = slices.DeleteFunc(in.Nodes, func(m string) bool { return m == node })
	return len(in.Nodes) != n
}

// CheckClaim tells whether c may be applied: its slot exists and is free or
// already holds c.Value. Errors wrap ErrNoSlot or ErrSlotTaken.
func (in *Instance) CheckClaim(c Claim) error {
	v, ok := in.Usage[c.Slot]
	if !ok {
		return fmt.Errorf("claiming %s: %w", c.Slot, ErrNoSlot)
	}
	if v != "" && v != c.Value {
		return fmt.Errorf("claiming %s for %q: %w by %q", c.Slot, c.Value, ErrSlotTaken, v)
	}
	return nil
}

// Apply sets c's slot to c.Value after CheckClaim, and reports whether the
// slot changed.
func (in *Instance) Apply(c Claim) (bool, error) {
	if err := in.CheckClaim(c); err != nil {
		return false, err
	}
	changed := in.Usage[c.Slot] != c.Value
	in.Usage[c.Slot] = c.Value
	return changed, nil
}

// Release frees c's slot if it holds exactly c.Value, so that a release
// never undoes another claim, and drops the slot if it lies above the
// capacity. It reports whether the slot was freed.
func (in *Instance) Release(c Claim) bool {
	if c.Value == "" || in.Usage[c.Slot] != c.Value {
		return false
	}
	in.Usage[c.Slot] = ""
	in.trimSlots()
	return true
}

// Unused reports whether no node sees the device and no slot is held: the
// Instance can be deleted.
func (in *Instance) Unused() bool {
	return !in.Held() && len(in.Nodes) == 0
}

// resize gives every slot below capacity an entry and drops free ones
// above it; claimed slots above it stay until released.
func (in *Instance) resize() {
	for _, s := range in.Slots() {
		if _, ok := in.Usage[s]; !ok {
			in.Usage[s] = ""
		}
	}
	in.trimSlots()
}

func (in *Instance) trimSlots() {
	keep := make(map[string]bool, in.Capacity)
	for _, s := range in.Slots() {
		keep[s] = true
	}
	for s, v := range in.Usage {
		if !keep[s] && v == "" {
			delete(in.Usage, s)
		}
	}
}

// fingerprint is the Instance's content in a comparable form.
func (in *Instance) fingerprint() string {
	return fmt.Sprintf("%q %q %v %d %q %v %v", in.Config, in.DeviceID, in.Shared, in.Capacity, in.Nodes, in.Usage, in.Properties)
}

// ForgetNodeClaims records that node has left the cluster: it frees every
// slot node holds, at either level, and removes node from the Instance's
// nodes. It reports how many slots it freed and whether anything changed.
// A malformed usage value is left alone: whose claim it is cannot be
// told. Freed slots above the capacity are dropped, as Release does.
func (in *Instance) ForgetNodeClaims(node string) (freed int, changed bool) {
	if node == "" {
		return 0, false
	}
	for s, v := range in.Usage {
		if u, err := ParseUsage(v); err == nil && u.Kind != Free && u.Node == node {
			in.Usage[s] = ""
			freed++
		}
	}
	if freed > 0 {
		in.trimSlots()
	}
	removed := in.Forget(node)
	return freed, freed > 0 || removed
}

// NodeNames returns, sorted and once each, the nodes the Instance names:
// those that see it and those whose claims hold its slots.
func (in *Instance) NodeNames() []string {
	names := slices.Clone(in.Nodes)
	for _, v := range in.Usage {
		if u, err := ParseUsage(v); err == nil && u.Kind != Free {
			names = append(names, u.Node)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

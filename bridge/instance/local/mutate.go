package local

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Claim sets every claim's slot, all or nothing.
func (s *Store) Claim(ctx context.Context, claims []instance.Claim) error {
	return s.update(func(doc *document) (bool, error) {
		for _, c := range claims {
			in := doc.Instances[c.Instance]
			if in == nil {
				return false, fmt.Errorf("claiming %s: %w: instance %s", c.Slot, instance.ErrNoSlot, c.Instance)
			}
			v, ok := in.Usage[c.Slot]
			if !ok {
				return false, fmt.Errorf("claiming %s: %w", c.Slot, instance.ErrNoSlot)
			}
			if v != "" && v != c.Value {
				return false, fmt.Errorf("claiming %s for %q: %w by %q", c.Slot, c.Value, instance.ErrSlotTaken, v)
			}
		}
		changed := false
		for _, c := range claims {
			u := doc.Instances[c.Instance].Usage
			changed = changed || u[c.Slot] != c.Value
			u[c.Slot] = c.Value
		}
		return changed, nil
	})
}

// Release frees the slots that hold exactly their claim's value.
func (s *Store) Release(ctx context.Context, claims []instance.Claim) error {
	return s.update(func(doc *document) (bool, error) {
		changed := false
		for _, c := range claims {
			in := doc.Instances[c.Instance]
			if in == nil || in.Usage[c.Slot] != c.Value || c.Value == "" {
				continue
			}
			in.Usage[c.Slot], changed = "", true
			trimSlots(in)
		}
		if changed {
			deleteUnseen(doc)
		}
		return changed, nil
	})
}

// Observe records what node sees of the pool config.
func (s *Store) Observe(ctx context.Context, node, config string, seen []instance.Instance) error {
	return s.update(func(doc *document) (bool, error) {
		before := fingerprint(doc)
		names := map[string]bool{}
		for _, want := range seen {
			names[want.Name] = true
			in := doc.Instances[want.Name]
			if in == nil {
				in = &instance.Instance{Name: want.Name, Usage: map[string]string{}}
				doc.Instances[want.Name] = in
			}
			in.Config, in.DeviceID, in.Shared, in.Properties = want.Config, want.DeviceID, want.Shared, want.Properties
			in.Capacity = want.Capacity
			if !in.Sees(node) {
				in.Nodes = append(in.Nodes, node)
				slices.Sort(in.Nodes)
			}
			resize(in)
		}
		for name, in := range doc.Instances {
			if in.Config == config && !names[name] {
				in.Nodes = slices.DeleteFunc(in.Nodes, func(n string) bool { return n == node })
			}
		}
		deleteUnseen(doc)
		return fingerprint(doc) != before, nil
	})
}

// resize gives every slot below capacity an entry and drops free ones
// above it; claimed slots above it stay until released.
func resize(in *instance.Instance) {
	for _, s := range in.Slots() {
		if _, ok := in.Usage[s]; !ok {
			in.Usage[s] = ""
		}
	}
	trimSlots(in)
}

func trimSlots(in *instance.Instance) {
	keep := map[string]bool{}
	for _, s := range in.Slots() {
		keep[s] = true
	}
	for s, v := range in.Usage {
		if !keep[s] && v == "" {
			delete(in.Usage, s)
		}
	}
}

// deleteUnseen removes the Instances no node sees and nobody uses.
func deleteUnseen(doc *document) {
	for name, in := range doc.Instances {
		if len(in.Nodes) == 0 && in.FreeSlots() == in.Capacity && len(in.Usage) <= in.Capacity {
			delete(doc.Instances, name)
		}
	}
}

// fingerprint tells whether Observe changed anything, so that a
// rediscovery that finds the same devices writes nothing.
func fingerprint(doc *document) string {
	b, _ := json.Marshal(doc.Instances)
	return string(b)
}

package local

import (
	"context"
	"encoding/json"
	"fmt"

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
			if err := in.CheckClaim(c); err != nil {
				return false, err
			}
		}
		changed := false
		for _, c := range claims {
			ch, err := doc.Instances[c.Instance].Apply(c)
			if err != nil {
				return false, err // two claims of one slot with different values
			}
			changed = changed || ch
		}
		return changed, nil
	})
}

// Release frees the slots that hold exactly their claim's value.
func (s *Store) Release(ctx context.Context, claims []instance.Claim) error {
	return s.update(func(doc *document) (bool, error) {
		changed := false
		for _, c := range claims {
			if in := doc.Instances[c.Instance]; in != nil && in.Release(c) {
				changed = true
			}
		}
		if changed {
			deleteUnused(doc)
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
				in = &instance.Instance{Name: want.Name}
				doc.Instances[want.Name] = in
			}
			in.Observe(node, want)
		}
		for name, in := range doc.Instances {
			if in.Config == config && !names[name] {
				in.Forget(node)
			}
		}
		deleteUnused(doc)
		return fingerprint(doc) != before, nil
	})
}

// deleteUnused removes the Instances no node sees and nobody uses.
func deleteUnused(doc *document) {
	for name, in := range doc.Instances {
		if in.Unused() {
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

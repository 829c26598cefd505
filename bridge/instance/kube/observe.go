package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Observe implements instance.Store. Who sees a device is recorded in
// node's Presence of config, not in the Instance: node's Presence is
// written when the set of devices changed, and each seen Instance only
// when it is missing or what node sees of it changed (capacity,
// properties), so that a node joining writes one object per pool. Nodes
// that a bridge of an older release wrote into an Instance are read as
// they are; node's own name is removed from them (once).
//
// A node's "I see X" wins against the elected bridge's "nobody sees X"
// (PruneUnseen), which marks X, looks at the Presences again, and
// deletes X guarded by the mark's resourceVersion. So the Presence is
// written first, before any Instance: a new device is listed before its
// Instance exists, and never unlisted however long the creations take.
// Then each Instance the Presence did not list before (a device new to
// node, or seen again) is read from the API server rather than the
// informer: one the elected bridge marked is written again, which drops
// the mark and fails the deletion; one it has deleted meanwhile is
// created again, before Observe returns.
//
// With ServedPools it starts following config's Instances first, unless
// it does, and stops once seen is nil: the pool is no longer served
// (Store.retire), and node's Presence of it is deleted.
//
// An Instance that no node sees any more is not deleted here: that is
// PruneUnseen's, after a grace period, for the elected bridge.
func (s *Store) Observe(ctx context.Context, node, config string, seen []instance.Instance) error {
	if s.scope == ServedPools {
		if err := s.startServing(ctx, node, config, seen != nil); err != nil {
			return err
		}
		if seen == nil {
			defer s.retire(config, node)
		}
	}
	names := instanceNames(seen)
	listed, capErr := s.capPresence(config, names)
	before, err := s.observePresence(ctx, node, config, listed, seen)
	errs := []error{capErr, err}
	if err != nil {
		// What it listed is unknown: every device is read afresh.
		before = nil
	}
	errs = append(errs, s.describeAll(ctx, node, config, seen, added(listed, before)))
	errs = append(errs, s.forgetLegacy(ctx, node, config, names))
	return errors.Join(errs...)
}

// startServing follows pool, unless this Store does, and records whether node
// serves it, at once for a retire under way (Store.following).
func (s *Store) startServing(ctx context.Context, node, pool string, serves bool) error {
	s.following.RLock()
	defer s.following.RUnlock()
	// The pool first: a pool followed anew starts the informer of the
	// unlabelled Instances again, whose list is then waited for too.
	if err := s.follow(ctx, pool); err != nil {
		return err
	}
	if err := s.follow(ctx, unlabelledPool); err != nil {
		return err
	}
	s.serve(pool, node, serves)
	return nil
}

// instanceNames are the names of seen, sorted, each once; nil when seen
// is.
func instanceNames(seen []instance.Instance) []string {
	if seen == nil {
		return nil
	}
	names := make([]string, 0, len(seen))
	for _, in := range seen {
		names = append(names, in.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// ErrPresenceFull is wrapped by Observe's error when a node sees more
// devices of a pool than a Presence may list (MaxPresenceDevices), not
// counting those held: the rest are not listed, and may be pruned.
var ErrPresenceFull = errors.New("more devices than a Presence may list")

// capPresence is names (sorted) as a Presence may list them: at most
// MaxPresenceDevices. A pool at that many devices still shows a device
// that vanished while a container holds it (discovery keeps it until it
// is released), one name too many for the CRD, which would refuse the
// Presence from then on. Names of Instances whose slots are held are left
// out first (the elected bridge never deletes a held Instance), then the
// last names, with ErrPresenceFull.
func (s *Store) capPresence(pool string, names []string) ([]string, error) {
	over := len(names) - MaxPresenceDevices
	if over <= 0 {
		return names, nil
	}
	out := make([]string, 0, len(names))
	for i := len(names) - 1; i >= 0; i-- {
		if over > 0 {
			if in, err := s.cached(names[i]); err == nil && in != nil && in.Held() {
				over--
				continue
			}
		}
		out = append(out, names[i])
	}
	slices.Reverse(out)
	if over > 0 {
		return out[:MaxPresenceDevices], fmt.Errorf("pool %s: %d devices: %w (%d): the last %d are not listed",
			pool, len(names), ErrPresenceFull, MaxPresenceDevices, over)
	}
	return out, nil
}

// added is the set of names that before (sorted) lacks.
func added(names, before []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		if _, found := slices.BinarySearch(before, n); !found {
			out[n] = true
		}
	}
	return out
}

// freshListMin is the number of new devices from which Observe reads
// the API server's copies of the pool's Instances with one list rather
// than a read each, when they are an eighth of the pool or more: a node
// joining a pool of thousands of shared devices makes one request where
// it would make thousands.
const freshListMin = 32

// describeAll describes each of seen (describe), the API server's copy
// read first for those in fresh.
func (s *Store) describeAll(ctx context.Context, node, pool string, seen []instance.Instance, fresh map[string]bool) error {
	var listed map[string]*unstructured.Unstructured
	if len(fresh) >= freshListMin && len(fresh)*8 >= len(seen) {
		// A failed list leaves a read each.
		listed, _ = s.listPool(ctx, pool)
	}
	var errs []error
	for _, want := range seen {
		var first readPlan
		switch obj, ok := listed[want.Name]; {
		case listed != nil && fresh[want.Name]:
			first = readPlan{given: true, obj: obj}
			if !ok {
				first.obj = nil
			}
		case fresh[want.Name]:
			first = readPlan{fresh: true}
		}
		err := s.describe(ctx, node, want, first)
		if err != nil {
			// Listed, and perhaps missing: keep creates it if so.
			s.lostInstance(want.Name)
		}
		errs = append(errs, err)
		hook(s.test.described, want.Name)
	}
	return errors.Join(errs...)
}

// listPool is the API server's copy of pool's (labelled) Instances, by
// name.
func (s *Store) listPool(ctx context.Context, pool string) (map[string]*unstructured.Unstructured, error) {
	list, err := s.client.List(ctx, metav1.ListOptions{LabelSelector: poolSelector(pool)})
	if err != nil {
		return nil, fmt.Errorf("listing pool %s: %w", pool, err)
	}
	out := make(map[string]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].GetName()] = &list.Items[i]
	}
	return out, nil
}

// describe writes want's Instance if it is missing, says something else
// of the device than want, lacks its pool label, carries the elected
// bridge's mark, or names node among the nodes an older bridge recorded.
// first is how it is read first.
func (s *Store) describe(ctx context.Context, node string, want instance.Instance, first readPlan) error {
	return s.run(ctx, &modification{store: s, name: want.Name, mode: upsert, first: first,
		fn: func(in *instance.Instance) (bool, error) {
			described := in.Describe(want)
			forgot := in.Forget(node)
			return described || forgot, nil
		},
		rewrite: func(obj *unstructured.Unstructured) bool {
			return obj.GetLabels()[LabelPool] != LabelValue(want.Config) || marked(obj)
		},
	})
}

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// sweepResult is the departed-node sweep's figures.
type sweepResult struct {
	node           string
	touched, freed int           // Instances that named the node; its slots freed
	took           time.Duration // ForgetNode
	prop           time.Duration // its return to the last other store showing it all
	load           load
}

// sweep stops the first node's store, as if its node were deleted, and
// has the second node's clear it the way the departed-node janitor's
// leader does (kube.Store.ForgetNode), timing it to every other store.
func (s *sim) sweep(ctx context.Context) error {
	gone, leader := s.nodes[0], s.nodes[1]
	gone.stop()
	gone.gone = true
	live := s.live()
	remaining := make([][]string, len(live)) // per store, what it shows of gone
	for i, n := range live {
		all, err := n.store.List(ctx)
		if err != nil {
			return err
		}
		for _, in := range all {
			if slices.Contains(in.NodeNames(), gone.name) {
				remaining[i] = append(remaining[i], in.Name)
			}
		}
	}
	r := sweepResult{node: gone.name, touched: len(remaining[0])}
	s.progress("cluster: %s clearing departed %s from %d Instances", leader.name, gone.name, r.touched)
	tr := newTracker(ctx, storesOf(live))
	defer tr.close()
	ch := tr.add(-1, func(i int, st *kube.Store) bool {
		remaining[i] = forgotten(st, remaining[i], gone.name)
		return len(remaining[i]) == 0
	})
	var returned, last time.Time
	var err error
	r.load, _, err = s.measure(ctx, func() error {
		start := time.Now()
		r.freed, err = leader.store.ForgetNode(ctx, gone.name)
		r.took, returned = time.Since(start), time.Now()
		if err != nil {
			return err
		}
		last, err = tr.wait(ctx, ch, settle)
		return err
	})
	if err != nil {
		return err
	}
	r.prop = last.Sub(returned)
	freed := r.freed
	if freed != len(gone.held) {
		return fmt.Errorf("ForgetNode freed %d slots of %s, which held %d", freed, gone.name, len(gone.held))
	}
	gone.held = nil
	s.res.sweep = r
	return nil
}

// forgotten drops from names, in order, those that st no longer shows
// naming node, and stops at the first that it still does: ForgetNode
// writes in name order, so the rest wait for later wake-ups, and a check
// costs a Get or two rather than one per Instance left.
func forgotten(st *kube.Store, names []string, node string) []string {
	for len(names) > 0 {
		in, err := st.Get(names[0])
		if err != nil || (in != nil && slices.Contains(in.NodeNames(), node)) {
			break
		}
		names = names[1:]
	}
	return names
}

// release has every live node release its claims, inFlight nodes at a
// time, then checks that every store and the API show every slot free.
func (s *sim) release(ctx context.Context) error {
	live := s.live()
	s.progress("cluster: %d nodes releasing their claims", len(live))
	var err error
	s.res.releaseLoad, s.res.releaseTook, err = s.measure(ctx, func() error {
		work := make(chan *simNode)
		errs := make([]error, len(live))
		var wg sync.WaitGroup
		for range s.o.inFlight {
			wg.Go(func() {
				for n := range work {
					errs[slices.Index(live, n)] = n.releaseAll(ctx)
				}
			})
		}
		for _, n := range live {
			s.res.released += len(n.held)
			work <- n
		}
		close(work)
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return err
	}
	if err := s.waitViews(ctx, func(_ string, all []instance.Instance) bool { return allFree(all) }); err != nil {
		return err
	}
	return s.leftovers(ctx)
}

// releaseAll releases n's claims one by one, as its undos would.
func (n *simNode) releaseAll(ctx context.Context) error {
	for _, c := range n.held {
		if err := n.store.Release(ctx, []instance.Claim{c}); err != nil {
			return fmt.Errorf("%s releasing %s: %w", n.name, c.Slot, err)
		}
	}
	n.held = nil
	return nil
}

func allFree(all []instance.Instance) bool {
	for _, in := range all {
		for _, v := range in.Usage {
			if v != "" {
				return false
			}
		}
	}
	return true
}

// leftovers fails when the API server itself, not a store's cache, still
// holds a claim.
func (s *sim) leftovers(ctx context.Context) error {
	client, err := dynamic.NewForConfig(s.env.Config)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	list, err := client.Resource(kube.Resource).Namespace(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the Instances: %w", err)
	}
	for _, obj := range list.Items {
		usage, _, err := unstructured.NestedStringMap(obj.Object, "spec", "deviceUsage")
		if err != nil {
			return fmt.Errorf("instance %s: %w", obj.GetName(), err)
		}
		for slot, v := range usage {
			if v != "" {
				return fmt.Errorf("slot %s still claimed (%q) after every release", slot, v)
			}
		}
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// claimSample is one claim of the allocation phase.
type claimSample struct {
	refused           bool // ErrSlotTaken: another node took the slot first
	writes, conflicts int
	took              time.Duration // the Claim call
	returned          time.Time
	change            *change // nil when refused
}

// allocate makes the claims, inFlight at a time, each by a random node on
// a free slot of a random Instance in that node's view, and times each
// claim's way to every other store.
func (s *sim) allocate(ctx context.Context) error {
	s.progress("cluster: %d claims, %d in flight", s.o.claims, s.o.inFlight)
	tr := newTracker(ctx, storesOf(s.nodes))
	defer tr.close()
	samples := make([]claimSample, s.o.claims)
	var err error
	s.res.claimsLoad, s.res.claimsTook, err = s.measure(ctx, func() error {
		errs := make([]error, s.o.claims)
		work := make(chan int)
		var wg sync.WaitGroup
		for range s.o.inFlight {
			wg.Go(func() {
				for i := range work {
					samples[i], errs[i] = s.claimOne(ctx, tr, i)
				}
			})
		}
		for i := range s.o.claims {
			work <- i
		}
		close(work)
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return err
	}
	if err := s.res.alloc.add(ctx, tr, samples); err != nil {
		return err
	}
	s.res.memClaims, err = s.memory()
	return err
}

// claimOne is claim i: its node and Instance are drawn from i, so that a
// run is repeatable as far as the race between nodes allows.
func (s *sim) claimOne(ctx context.Context, tr *tracker, i int) (claimSample, error) {
	rng := rand.New(rand.NewPCG(uint64(i), 2))
	k := rng.IntN(len(s.nodes))
	n := s.nodes[k]
	n.mu.Lock()
	defer n.mu.Unlock()
	c, err := s.pick(n, rng.IntN(len(s.devices)))
	if err != nil {
		return claimSample{}, err
	}
	if i%2 == 1 {
		c.Value = instance.ConfigurationLevelUsage(strconv.Itoa(i), n.name)
	}
	ch := tr.add(k, func(_ int, st *kube.Store) bool {
		in, err := st.Get(c.Instance)
		return err == nil && in != nil && in.Usage[c.Slot] == c.Value
	})
	// The node claims nothing else meanwhile, so the deltas are this
	// claim's.
	before, start := n.store.Stats(), time.Now()
	err = n.store.Claim(ctx, []instance.Claim{c})
	x := claimSample{took: time.Since(start), returned: time.Now(), change: ch}
	after := n.store.Stats()
	x.writes, x.conflicts = after.Writes-before.Writes, after.Conflicts-before.Conflicts
	switch {
	case err == nil:
		n.held = append(n.held, c)
	case errors.Is(err, instance.ErrSlotTaken):
		tr.drop(ch)
		x.refused, x.change = true, nil
	default:
		tr.drop(ch)
		return x, fmt.Errorf("%s claiming %s: %w", n.name, c.Slot, err)
	}
	return x, nil
}

// pick is the first free slot, in n's view, of the first Instance from
// the from'th on that has one; it claims at the Instance level.
func (s *sim) pick(n *simNode, from int) (instance.Claim, error) {
	for j := range s.devices {
		name := s.devices[(from+j)%len(s.devices)].Name
		in, err := n.store.Get(name)
		if err != nil {
			return instance.Claim{}, err
		}
		if in == nil {
			return instance.Claim{}, fmt.Errorf("%s does not show %s", n.name, name)
		}
		for _, slot := range in.Slots() {
			if in.Usage[slot] == "" {
				return instance.Claim{Instance: name, Slot: slot, Value: instance.InstanceLevelUsage(n.name)}, nil
			}
		}
	}
	return instance.Claim{}, fmt.Errorf("%s sees no free slot", n.name)
}

// allocResult is the allocation phase's figures.
type allocResult struct {
	allocated, refused int
	// writes and conflicts of the allocated claims alone, and the most
	// writes one took; the refused claims' are in the phase's load.
	writes, conflicts, maxWrites int
	took                         []time.Duration // Claim calls that allocated
	prop                         []time.Duration // return to the last other store, negative when before
	early                        int             // claims every other store showed before Claim returned
}

// add records the samples, waiting until every other store shows each
// allocated claim.
func (a *allocResult) add(ctx context.Context, tr *tracker, samples []claimSample) error {
	for _, x := range samples {
		if x.refused {
			a.refused++
			continue
		}
		last, err := tr.wait(ctx, x.change, settle)
		if err != nil {
			return err
		}
		a.allocated++
		a.writes += x.writes
		a.conflicts += x.conflicts
		a.maxWrites = max(a.maxWrites, x.writes)
		a.took = append(a.took, x.took)
		a.prop = append(a.prop, last.Sub(x.returned))
		if last.Before(x.returned) {
			a.early++
		}
	}
	return nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// raceResult is what nodes kube stores racing for one slot did.
type raceResult struct {
	nodes, rounds int
	wins          []int
	// writes and conflicts are the API writes of the claims alone (not
	// the releases between rounds) and how many of them conflicted.
	writes, conflicts int
	maxConflicts      int // in one round
	// refused counts losers that got ErrSlotTaken, as they must.
	refused int
}

// race has nodes kube stores, each with its own client as on its own
// node, claim the one slot of a shared Instance at the same instant,
// rounds times. Every store sees the slot free before each round, so
// that each loser really writes and conflicts rather than refusing from
// its cache. More or fewer than one winner is an error.
func race(ctx context.Context, env *apitest.Env, nodes, rounds int) (raceResult, error) {
	res := raceResult{nodes: nodes, rounds: rounds, wins: make([]int, nodes)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the informers
	ns, err := env.NewNamespace(ctx, "bench-")
	if err != nil {
		return res, err
	}
	cam := instance.Instance{Name: instance.Name("camera-race", "gate", "", true), Config: "camera-race",
		DeviceID: "gate", Shared: true, Capacity: 1}
	stores := make([]*kube.Store, nodes)
	for i := range stores {
		name := fmt.Sprintf("n%d", i)
		if stores[i], err = newKubeStore(ctx, env.Config, ns, name); err != nil {
			return res, err
		}
		if err := stores[i].Observe(ctx, name, cam.Config, []instance.Instance{cam}); err != nil {
			return res, fmt.Errorf("observing the raced Instance: %w", err)
		}
	}
	slot := instance.SlotID(cam.Name, 0)
	for round := range rounds {
		if err := waitSlot(ctx, stores, cam.Name, slot, ""); err != nil {
			return res, fmt.Errorf("round %d: %w", round, err)
		}
		if err := res.round(ctx, stores, cam.Name, slot); err != nil {
			return res, fmt.Errorf("round %d: %w", round, err)
		}
	}
	return res, nil
}

// round is one race, recorded, and the winner's release.
func (res *raceResult) round(ctx context.Context, stores []*kube.Store, name, slot string) error {
	before := sumStats(stores)
	errs := make([]error, len(stores))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			<-gate
			errs[i] = s.Claim(ctx, []instance.Claim{{Instance: name, Slot: slot, Value: fmt.Sprintf("n%d", i)}})
		})
	}
	close(gate)
	wg.Wait()
	after := sumStats(stores)
	res.writes += after.Writes - before.Writes
	res.conflicts += after.Conflicts - before.Conflicts
	res.maxConflicts = max(res.maxConflicts, after.Conflicts-before.Conflicts)
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			return fmt.Errorf("n%d and n%d both won the slot", winner, i)
		case err == nil:
			winner = i
		case errors.Is(err, instance.ErrSlotTaken):
			res.refused++
		default:
			return fmt.Errorf("n%d: %w", i, err)
		}
	}
	if winner < 0 {
		return errors.New("nobody won the slot")
	}
	res.wins[winner]++
	claim := instance.Claim{Instance: name, Slot: slot, Value: fmt.Sprintf("n%d", winner)}
	return stores[winner].Release(ctx, []instance.Claim{claim})
}

func sumStats(stores []*kube.Store) kube.Stats {
	var sum kube.Stats
	for _, s := range stores {
		st := s.Stats()
		sum.Writes += st.Writes
		sum.Conflicts += st.Conflicts
	}
	return sum
}

// waitSlot waits until every store's view of slot is want.
func waitSlot(ctx context.Context, stores []*kube.Store, name, slot, want string) error {
	ctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	for i, s := range stores {
		for {
			all, err := s.List(ctx)
			if err != nil {
				return fmt.Errorf("n%d's view: %w", i, err)
			}
			if usage(all, name, slot) == want {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("n%d's view of %s is still %q: %w", i, slot, usage(all, name, slot), ctx.Err())
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	return nil
}

func usage(all []instance.Instance, name, slot string) string {
	for _, in := range all {
		if in.Name == name {
			return in.Usage[slot]
		}
	}
	return "(no instance)"
}

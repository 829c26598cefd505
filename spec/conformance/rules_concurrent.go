package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cdiexec/cdi/spec"
)

// maxParallel bounds the ADDs run at once: enough to contend for the
// lock, few enough for a small machine.
const maxParallel = 16

// checkConcurrentAdd: parallel ADDs for distinct request-ids hand out
// each slot at most once, and exactly as many units as were free.
func checkConcurrentAdd(ctx context.Context, s *subject) error {
	if err := s.facts.need010(); err != nil {
		return err
	}
	rs, free, err := s.facts.pick(1)
	if err != nil {
		return err
	}
	n := min(free+3, maxParallel)
	return s.race(ctx, n, min(n, free), func(i int) []string {
		return []string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=" + rs + ":1", "CDI_REQUEST_ID=" + s.requestID(i)}
	})
}

// checkConcurrentPinned: parallel ADDs pinned to one device get exactly
// its free slots, each once; the others are code 10.
func checkConcurrentPinned(ctx context.Context, s *subject) error {
	if err := s.facts.need010(); err != nil {
		return err
	}
	rs, _, err := s.facts.pick(1)
	if err != nil {
		return err
	}
	d := s.freeDevice(rs)
	if d == nil {
		return skipf("the inventory has no healthy %s device with a free slot", rs)
	}
	free := d.Capacity - d.Used
	n := min(free+3, maxParallel)
	return s.race(ctx, n, min(n, free), func(i int) []string {
		return []string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=" + rs + ":1", "CDI_REQUEST_ID=" + s.requestID(i), "CDI_REQUEST_DEVICES=" + d.ID}
	})
}

// race runs n one-unit ADDs at once and checks that exactly want of them
// succeed, the rest with code 10, that no slot is handed out twice or
// beyond its device's capacity, and that LIST shows exactly the winners.
func (s *subject) race(ctx context.Context, n, want int, vars func(i int) []string) error {
	before, err := s.list(ctx)
	if err != nil {
		return err
	}
	held := heldSlots(before)
	var errs []error
	var won []string
	for i, r := range s.parallel(ctx, n, vars) {
		var res spec.AddResult
		if wantResult(r, s.facts.version, &res) != nil {
			errs = append(errs, wantError(r, spec.CodeInsufficientResources))
			continue
		}
		id := s.requestID(i)
		s.track(id)
		won = append(won, id)
		errs = append(errs, s.claim(held, id, res.Units))
	}
	if len(won) != want {
		errs = append(errs, fmt.Errorf("%d of %d parallel ADDs succeeded, want %d, as many as there were free units", len(won), n, want))
	}
	return errors.Join(append(errs, s.listShows(ctx, before, won))...)
}

// claim records the slots a winner got, failing on one already held or
// beyond its device's capacity.
func (s *subject) claim(held map[slotKey]string, id string, units []spec.Unit) error {
	if len(units) != 1 {
		return fmt.Errorf("ADD of one unit for %s returned units [%s]", id, describeUnits(units))
	}
	u := units[0]
	k := slotKey{u.Device, u.Slot}
	if other, taken := held[k]; taken {
		return fmt.Errorf("slot %d of device %s handed out twice: to %s and %s", u.Slot, u.Device, other, id)
	}
	held[k] = id
	if d := s.facts.device(u.Device); d == nil || u.Slot < 0 || u.Slot >= d.Capacity {
		return fmt.Errorf("%s got slot %d of device %s, beyond its capacity or not in the inventory", id, u.Slot, u.Device)
	}
	return nil
}

// listShows checks that LIST shows what it showed before plus the winners.
func (s *subject) listShows(ctx context.Context, before *spec.ListResult, won []string) error {
	ids, err := s.listIDs(ctx)
	if err != nil {
		return err
	}
	want := slices.Clone(won)
	for _, a := range before.Allocations {
		want = append(want, a.RequestID)
	}
	slices.Sort(want)
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		return fmt.Errorf("LIST shows %v after the parallel ADDs, want %v", ids, want)
	}
	return nil
}

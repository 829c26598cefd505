// Package storetest is the contract every store.Store must keep, as a
// test suite: each implementation's tests call Run with a way to open
// stores over one stored state.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/spec"
)

// Opener opens a Store over the stored state of one test, as a plugin
// call started under bootID would: stores it opens one after the other
// share what the earlier ones saved, the way calls of one plugin share
// its state file.
type Opener func(bootID string) store.Store

// Run runs the contract, each rule in a subtest with a fresh state made
// by newState.
func Run(t *testing.T, newState func(t *testing.T) Opener) {
	for _, c := range []struct {
		name string
		test func(*testing.T, Opener)
	}{
		{"StartsEmpty", startsEmpty},
		{"UpdateSavesWhatViewSees", updateSaves},
		{"FailedUpdateSavesNothing", failedUpdate},
		{"ViewSavesNothing", viewSavesNothing},
		{"UnsavableStateRefused", unsavable},
		{"RebootDropsAllocations", rebootDrops},
		{"UnknownBootKeepsAllocations", unknownBootKeeps},
		{"DoneContextRunsNothing", doneContext},
		{"ParallelUpdatesAllCount", parallelUpdates},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, newState(t)) })
	}
}

const bootA, bootB = "boot-a", "boot-b"

var errFn = errors.New("fn failed")

// Record returns a record holding slot 0 of device dev, with every field
// set, so that a round trip checks them all.
func Record(dev string) *store.Record {
	return &store.Record{
		Request:   "tty:1",
		Devices:   []string{dev},
		NUMANodes: []int{0, 1},
		Created:   time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Result: spec.AddResult{
			CDIVersion:  spec.Version010,
			Devices:     []string{"/dev/" + dev},
			DeviceNodes: []spec.DeviceNode{{HostPath: "/dev/" + dev, ContainerPath: "/dev/" + dev, Permissions: "rw"}},
			Env:         map[string]string{"TTY": "/dev/" + dev},
			CDIDevices:  []string{"cdi.local/tty=" + dev},
			Units:       []spec.Unit{{Resource: "tty", Device: dev, Slot: 0}},
		},
	}
}

// add returns an Update fn that records Record(dev) under id.
func add(id, dev string) func(*store.State) error {
	return func(st *store.State) error {
		st.Allocations[id] = Record(dev)
		return nil
	}
}

// view returns the state as View sees it.
func view(t *testing.T, s store.Store) *store.State {
	t.Helper()
	var got *store.State
	if err := s.View(t.Context(), func(st *store.State) error { got = st; return nil }); err != nil {
		t.Fatalf("View: %v", err)
	}
	return got
}

func update(t *testing.T, s store.Store, fn func(*store.State) error) {
	t.Helper()
	if err := s.Update(t.Context(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func ids(st *store.State) []string { return slices.Sorted(maps.Keys(st.Allocations)) }

func startsEmpty(t *testing.T, open Opener) {
	st := view(t, open(bootA))
	if st.Format != store.FormatVersion || st.Allocations == nil || len(st.Allocations) != 0 || len(st.Dropped) != 0 {
		t.Errorf("a new store's state: %+v, want an empty one of format %d", st, store.FormatVersion)
	}
}

func updateSaves(t *testing.T, open Opener) {
	s := open(bootA)
	update(t, s, add("r1", "tty13"))
	for name, st := range map[string]*store.State{"the same store": view(t, s), "the next call's": view(t, open(bootA))} {
		if got := st.Allocations["r1"]; !reflect.DeepEqual(got, Record("tty13")) || st.BootID != bootA {
			t.Errorf("%s View: boot %q, r1 %+v; want %q, %+v", name, st.BootID, got, bootA, Record("tty13"))
		}
	}
}

func failedUpdate(t *testing.T, open Opener) {
	s := open(bootA)
	update(t, s, add("r1", "tty13"))
	err := s.Update(t.Context(), func(st *store.State) error {
		delete(st.Allocations, "r1")
		st.Allocations["r2"] = Record("tty14")
		return errFn
	})
	if err != errFn { // unchanged: the very value fn returned
		t.Fatalf("Update = %v, want fn's error unchanged", err)
	}
	if got := ids(view(t, open(bootA))); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("after a failed Update: %v, want [r1]", got)
	}
}

func viewSavesNothing(t *testing.T, open Opener) {
	s := open(bootA)
	update(t, s, add("r1", "tty13"))
	err := s.View(t.Context(), func(st *store.State) error {
		delete(st.Allocations, "r1")
		st.Allocations["r2"] = Record("tty14")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(view(t, s)); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("after a View that changed its copy: %v, want [r1]", got)
	}
}

// A state no plugin could have written (here a slot held twice) is not
// saved, so that nothing is stored that would not load.
func unsavable(t *testing.T, open Opener) {
	s := open(bootA)
	update(t, s, add("r1", "tty13"))
	if err := s.Update(t.Context(), add("r2", "tty13")); !errors.Is(err, store.ErrUnsavable) {
		t.Fatalf("Update holding a slot twice = %v, want ErrUnsavable", err)
	}
	if got := ids(view(t, s)); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("after a refused save: %v, want [r1]", got)
	}
}

// After a reboot, View leaves earlier allocations out and saves nothing;
// the next Update drops them, lists them in Dropped and records the new
// boot id.
func rebootDrops(t *testing.T, open Opener) {
	old := open(bootA)
	update(t, old, add("r2", "tty14"))
	update(t, old, add("r1", "tty13"))
	s := open(bootB)
	if st := view(t, s); len(st.Allocations) != 0 || len(st.Dropped) != 0 {
		t.Errorf("View after a reboot: %v, dropped %v; want nothing of either", ids(st), st.Dropped)
	}
	var dropped []string
	update(t, s, func(st *store.State) error {
		dropped = st.Dropped
		if len(st.Allocations) != 0 {
			return fmt.Errorf("an Update after a reboot sees %v", ids(st))
		}
		return nil
	})
	if !slices.Equal(dropped, []string{"r1", "r2"}) {
		t.Errorf("Dropped = %v, want [r1 r2]", dropped)
	}
	if st := view(t, open("")); st.BootID != bootB || len(st.Allocations) != 0 {
		t.Errorf("saved after the reboot: boot %q, %v; want %q and none", st.BootID, ids(st), bootB)
	}
}

// Where the boot id cannot be read, nothing is released because of it.
func unknownBootKeeps(t *testing.T, open Opener) {
	update(t, open(bootA), add("r1", "tty13"))
	s := open("")
	update(t, s, add("r2", "tty14"))
	if st := view(t, s); !slices.Equal(ids(st), []string{"r1", "r2"}) || st.BootID != bootA {
		t.Errorf("with no boot id: %v under %q, want [r1 r2] under %q", ids(st), st.BootID, bootA)
	}
}

func doneContext(t *testing.T, open Opener) {
	s := open(bootA)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ran := false
	fn := func(*store.State) error { ran = true; return nil }
	if err := s.Update(ctx, fn); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Update with a done context = %v, fn ran %v", err, ran)
	}
	if err := s.View(ctx, fn); !errors.Is(err, context.Canceled) || ran {
		t.Errorf("View with a done context = %v, fn ran %v", err, ran)
	}
}

// Updates from several goroutines, each through a store of its own as
// parallel plugin calls are, are serialised: none is lost.
func parallelUpdates(t *testing.T, open Opener) {
	const n = 16
	stores := make([]store.Store, n)
	for i := range stores {
		stores[i] = open(bootA)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range stores {
		wg.Go(func() {
			id := fmt.Sprintf("r%02d", i)
			errs[i] = s.Update(t.Context(), add(id, "tty"+id))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := len(view(t, open(bootA)).Allocations); got != n {
		t.Errorf("%d allocations after %d parallel Updates", got, n)
	}
}

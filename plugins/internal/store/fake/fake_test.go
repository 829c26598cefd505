package fake_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/fake"
)

const bootA, bootB = "boot-a", "boot-b"

var (
	errTest = errors.New("test error")
	errAny  = errors.New("any error") // in a table: some error is wanted
)

// add returns an fn that adds allocation id, then fails with err.
func add(id string, err error) func(*store.State) error {
	return func(st *store.State) error {
		st.Allocations[id] = &store.Record{Request: "tty=1"}
		return err
	}
}

func keys(st *store.State) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range st.Allocations {
			if !yield(k) {
				return
			}
		}
	})
}

func TestAllOrNothing(t *testing.T) {
	tests := []struct {
		name      string
		fn        func(*store.State) error
		failSave  error
		wantErr   error
		wantKeys  []string
		wantSaves int
	}{
		{"saved", add("new", nil), nil, nil, []string{"new", "old"}, 2},
		{"fn fails", add("new", errTest), nil, errTest, []string{"old"}, 1},
		{"save fails", add("new", nil), errTest, errTest, []string{"old"}, 1},
		{"unchanged, save would fail", func(*store.State) error { return nil }, errTest, nil, []string{"old"}, 1},
		{"fn removes and fails", func(st *store.State) error {
			delete(st.Allocations, "old")
			return errTest
		}, nil, errTest, []string{"old"}, 1},
		{"fn mutates a record and fails", func(st *store.State) error {
			st.Allocations["old"].Request = "changed"
			return errTest
		}, nil, errTest, []string{"old"}, 1},
		{"unsaveable state", func(st *store.State) error {
			st.Allocations = nil
			return nil
		}, nil, errAny, []string{"old"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fake.New(bootA)
			if err := s.Update(t.Context(), add("old", nil)); err != nil {
				t.Fatal(err)
			}
			s.SetFailSave(tt.failSave)
			err := s.Update(t.Context(), tt.fn)
			if !errMatches(err, tt.wantErr) {
				t.Errorf("Update = %v, want %v", err, tt.wantErr)
			}
			st := s.State()
			if got := keys(st); !slices.Equal(got, tt.wantKeys) {
				t.Errorf("stored allocations %v, want %v", got, tt.wantKeys)
			}
			if st.Allocations["old"].Request != "tty=1" {
				t.Errorf("stored record changed to %q", st.Allocations["old"].Request)
			}
			if s.Saves() != tt.wantSaves {
				t.Errorf("Saves = %d, want %d", s.Saves(), tt.wantSaves)
			}
		})
	}
}

func errMatches(err, want error) bool {
	if want == errAny {
		return err != nil
	}
	return errors.Is(err, want)
}

func TestFnErrorUnchanged(t *testing.T) {
	err := fake.New(bootA).Update(t.Context(), add("x", errTest))
	if err != errTest {
		t.Errorf("Update = %v, want fn's error itself", err)
	}
}

// TestNoAliasing checks that neither what fn keeps nor what State returns
// reaches the stored state.
func TestNoAliasing(t *testing.T) {
	s := fake.New(bootA)
	var kept *store.Record
	err := s.Update(t.Context(), func(st *store.State) error {
		kept = &store.Record{Request: "tty=1", Devices: []string{"d0"}}
		st.Allocations["r"] = kept
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kept.Devices[0] = "changed by fn later"
	s.State().Allocations["r"].Request = "changed via State"
	got := s.State().Allocations["r"]
	if got.Request != "tty=1" || got.Devices[0] != "d0" {
		t.Errorf("stored record changed to %+v", got)
	}
}

func TestBootID(t *testing.T) {
	tests := []struct {
		name        string
		stored, now string
		fnErr       error
		wantDropped []string
		wantBoot    string
		wantKept    int
	}{
		{"same boot", bootA, bootA, nil, nil, bootA, 2},
		{"reboot", bootA, bootB, nil, []string{"r1", "r2"}, bootB, 0},
		{"reboot, fn fails", bootA, bootB, errTest, []string{"r1", "r2"}, bootA, 2},
		{"stored boot id unknown", "", bootB, nil, nil, bootB, 2},
		{"current boot id unknown", bootA, "", nil, nil, bootA, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fake.New(tt.now)
			old := store.NewState(tt.stored)
			old.Allocations["r2"] = &store.Record{}
			old.Allocations["r1"] = &store.Record{}
			if err := s.SetState(old); err != nil {
				t.Fatal(err)
			}
			var seen []string
			err := s.Update(t.Context(), func(st *store.State) error {
				seen = st.Dropped
				return tt.fnErr
			})
			if err != tt.fnErr {
				t.Fatalf("Update = %v, want %v", err, tt.fnErr)
			}
			if !slices.Equal(seen, tt.wantDropped) {
				t.Errorf("Dropped = %v, want %v", seen, tt.wantDropped)
			}
			if st := s.State(); st.BootID != tt.wantBoot || len(st.Allocations) != tt.wantKept {
				t.Errorf("stored boot id %q with %d allocations, want %q with %d",
					st.BootID, len(st.Allocations), tt.wantBoot, tt.wantKept)
			}
		})
	}
}

func TestSetStateRefusesUnsaveable(t *testing.T) {
	s := fake.New(bootA)
	if err := s.SetState(&store.State{Format: store.FormatVersion}); err == nil {
		t.Error("SetState accepted a state without allocations")
	}
	if err := s.SetState(&store.State{Format: 2, Allocations: map[string]*store.Record{}}); err == nil {
		t.Error("SetState accepted another format")
	}
}

func TestFailLoad(t *testing.T) {
	s := fake.New(bootA)
	s.SetFailLoad(store.ErrCorrupt)
	err := s.Update(t.Context(), func(*store.State) error {
		t.Error("fn ran although the load failed")
		return nil
	})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Update = %v, want ErrCorrupt", err)
	}
	s.SetFailLoad(nil)
	if err := s.Update(t.Context(), add("r", nil)); err != nil {
		t.Errorf("Update after SetFailLoad(nil) = %v", err)
	}
}

func TestEmpty(t *testing.T) {
	st := fake.New(bootA).State()
	if st.Format != store.FormatVersion || st.BootID != bootA || st.Allocations == nil || len(st.Allocations) != 0 {
		t.Errorf("State of a new store = %+v", st)
	}
}

func TestContextDone(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := fake.New(bootA).Update(ctx, add("r", nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("Update = %v, want context.Canceled", err)
	}
}

func TestConcurrent(t *testing.T) {
	const workers, perWorker = 8, 25
	s := fake.New(bootA)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if err := s.Update(t.Context(), add(id, nil)); err != nil {
					t.Error(err)
				}
				_ = s.State()
			}
		})
	}
	wg.Wait()
	if n := len(s.State().Allocations); n != workers*perWorker || s.Saves() != n {
		t.Errorf("%d allocations after %d saves, want %d", n, s.Saves(), workers*perWorker)
	}
}

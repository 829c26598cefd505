package disk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/disk"
	"github.com/cdiexec/cdi/spec"
)

const bootA, bootB = "boot-a", "boot-b"

var errFn = errors.New("fn failed")

// record returns a record with every field set, so a round trip checks them
// all.
func record(req string) *store.Record {
	return &store.Record{
		Request:   req,
		Devices:   []string{"dev0", "dev1"},
		NUMANodes: []int{0, 1},
		Created:   time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Result: spec.AddResult{
			CDIVersion: "0.1.0",
			Devices:    []string{"vendor.com/tty=tty0"},
			Env:        map[string]string{"TTY": "/dev/ttyS0"},
			Units:      []spec.Unit{{Resource: "tty", Device: req}}, // one device per record: no slot held twice
		},
	}
}

// update runs Update with a background context and fails the test on error.
func update(t *testing.T, s *disk.Store, fn func(*store.State) error) {
	t.Helper()
	if err := s.Update(t.Context(), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// snapshot returns the state as the next Update sees it, without changing it.
func snapshot(t *testing.T, s *disk.Store) *store.State {
	t.Helper()
	var got *store.State
	update(t, s, func(st *store.State) error { got = st; return nil })
	return got
}

// seed stores st at path as an earlier run under st.BootID would have.
func seed(t *testing.T, path string, st *store.State) {
	t.Helper()
	update(t, disk.New(path, st.BootID), func(cur *store.State) error {
		*cur = *st
		return nil
	})
}

// counterKey is the record whose Request holds the counter of the
// concurrency test and the generation of the crash test.
const counterKey = "counter"

// counter returns the value kept in the counter record, 0 if there is none.
func counter(st *store.State) (int, error) {
	rec, ok := st.Allocations[counterKey]
	if !ok {
		return 0, nil
	}
	return strconv.Atoi(rec.Request)
}

// increment adds one to the counter.
func increment(st *store.State) error {
	n, err := counter(st)
	if err != nil {
		return err
	}
	st.Allocations[counterKey] = &store.Record{Request: strconv.Itoa(n + 1)}
	return nil
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestStatePath(t *testing.T) {
	got := disk.StatePath("/var/lib/cdi", "tty", "serial")
	if want := "/var/lib/cdi/tty/serial.json"; got != want {
		t.Errorf("StatePath = %q, want %q", got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	path := disk.StatePath(t.TempDir(), "tty", "serial")
	s := disk.New(path, bootA)
	want := map[string]*store.Record{"req-1": record("tty=1"), "req-2": record("tty=2")}
	update(t, s, func(st *store.State) error {
		st.Allocations = want
		return nil
	})

	got := snapshot(t, disk.New(path, bootA))
	if got.Format != store.FormatVersion || got.BootID != bootA || len(got.Dropped) != 0 {
		t.Errorf("got format %d, boot id %q, dropped %v", got.Format, got.BootID, got.Dropped)
	}
	if g, w := mustJSON(t, got.Allocations), mustJSON(t, want); g != w {
		t.Errorf("allocations after round trip:\n got %s\nwant %s", g, w)
	}
	checkFile(t, path)
}

// checkFile checks what a human troubleshooting finds: a readable,
// indented file, and a lock file beside it.
func checkFile(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", fi.Mode().Perm())
	}
	data := readFile(t, path)
	if !bytes.HasPrefix(data, []byte("{\n  \"format\": 1,\n")) || !bytes.HasSuffix(data, []byte("}\n")) {
		t.Errorf("file is not indented JSON:\n%s", data)
	}
	if _, err := os.Stat(path + ".lock"); err != nil {
		t.Errorf("lock file: %v", err)
	}
}

func TestMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "p.json")
	got := snapshot(t, disk.New(path, bootA))
	if g, w := mustJSON(t, got), mustJSON(t, store.NewState(bootA)); g != w {
		t.Errorf("state of missing file = %s, want %s", g, w)
	}
	// Nothing changed, so nothing is written.
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unchanged empty state was written: stat = %v", err)
	}
}

func TestCorrupt(t *testing.T) {
	tests := []struct {
		name, content, msg string
	}{
		{"garbage", "not json at all", "not valid JSON"},
		{"empty", "", "empty"},
		{"truncated", `{"format": 1, "bootID": "boot-a", "allocations": {`, "not valid JSON"},
		{"trailing data", `{"format": 1, "allocations": {}} {}`, "not valid JSON"},
		{"wrong format", `{"format": 2, "bootID": "boot-a", "allocations": {}}`, "format is 2"},
		{"no format", `{"bootID": "boot-a", "allocations": {}}`, "format is 0"},
		{"missing allocations", `{"format": 1, "bootID": "boot-a"}`, "allocations"},
		{"null allocations", `{"format": 1, "bootID": "boot-a", "allocations": null}`, "allocations"},
		{"null record", `{"format": 1, "bootID": "boot-a", "allocations": {"r": null}}`, `"r" is null`},
		{"not an object", `[]`, "want an object"},
		{"wrong type", `{"format": "1", "bootID": "boot-a", "allocations": {}}`, "format: wrong JSON type"},
		{"wrong type deep inside", `{"format": 1, "bootID": "boot-a", "allocations": {"r": {"result": {"units": [{"slot": "0"}]}}}}`, "allocations.r.result.units[0].slot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			called := false
			err := disk.New(path, bootA).Update(t.Context(), func(*store.State) error {
				called = true
				return nil
			})
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Update = %v, want an error wrapping ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not name the file and contain %q", err, tt.msg)
			}
			if called {
				t.Error("fn ran on a corrupt state")
			}
			if got := readFile(t, path); string(got) != tt.content {
				t.Errorf("corrupt file was changed to %q", got)
			}
		})
	}
}

func TestValidFormsAccepted(t *testing.T) {
	tests := []struct{ name, content string }{
		{"empty allocations", `{"format": 1, "bootID": "boot-a", "allocations": {}}`},
		{"compact", `{"format":1,"bootID":"boot-a","allocations":{"r":{"request":"tty=1"}}}`},
		{"unknown field", `{"format": 1, "bootID": "boot-a", "allocations": {}, "extra": true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			snapshot(t, disk.New(path, bootA))
			// Unchanged, so even a file not in our own layout is kept.
			if got := readFile(t, path); string(got) != tt.content {
				t.Errorf("unchanged state was rewritten as %s", got)
			}
		})
	}
}

func TestFnErrorSavesNothing(t *testing.T) {
	tests := []struct {
		name  string
		setup bool // whether a state is stored before
	}{
		{"missing file", false},
		{"existing file", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			s := disk.New(path, bootA)
			if tt.setup {
				update(t, s, func(st *store.State) error {
					st.Allocations["old"] = record("tty=1")
					return nil
				})
			}
			before, _ := os.ReadFile(path)
			err := s.Update(t.Context(), func(st *store.State) error {
				st.Allocations["new"] = record("tty=2")
				delete(st.Allocations, "old")
				return errFn
			})
			if err != errFn {
				t.Errorf("Update = %v, want fn's error unchanged", err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Errorf("state changed after fn failed:\nbefore %s\nafter %s", before, after)
			}
		})
	}
}

func TestUnsaveableStateRefused(t *testing.T) {
	tests := []struct {
		name string
		fn   func(*store.State)
	}{
		{"nil allocations", func(st *store.State) { st.Allocations = nil }},
		{"nil record", func(st *store.State) { st.Allocations["r"] = nil }},
		{"other format", func(st *store.State) { st.Format = 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			s := disk.New(path, bootA)
			update(t, s, func(st *store.State) error {
				st.Allocations["old"] = record("tty=1")
				return nil
			})
			before := readFile(t, path)
			err := s.Update(t.Context(), func(st *store.State) error { tt.fn(st); return nil })
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("Update = %v, want an error naming %s", err, path)
			}
			if after := readFile(t, path); !bytes.Equal(before, after) {
				t.Errorf("state changed:\nbefore %s\nafter %s", before, after)
			}
		})
	}
}

func TestUnchangedNotRewritten(t *testing.T) {
	tests := []struct {
		name string
		fn   func(*store.State) error
	}{
		{"no-op", func(*store.State) error { return nil }},
		{"same values written", func(st *store.State) error {
			st.Allocations["r"] = record("tty=1")
			st.BootID = bootA
			return nil
		}},
		{"added and removed", func(st *store.State) error {
			st.Allocations["tmp"] = record("tty=9")
			delete(st.Allocations, "tmp")
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			s := disk.New(path, bootA)
			update(t, s, func(st *store.State) error {
				st.Allocations["r"] = record("tty=1")
				return nil
			})
			before, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			update(t, s, tt.fn)
			after, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			// Every save renames a new inode into place.
			if !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) {
				t.Error("unchanged state was rewritten")
			}
		})
	}
}

func TestChangedIsRewritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	s := disk.New(path, bootA)
	update(t, s, func(st *store.State) error {
		st.Allocations["r"] = record("tty=1")
		return nil
	})
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	update(t, s, func(st *store.State) error {
		st.Allocations["r"].Devices = []string{"dev2"}
		return nil
	})
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Error("changed state was written in place, not renamed over")
	}
	if got := snapshot(t, s).Allocations["r"].Devices; !slices.Equal(got, []string{"dev2"}) {
		t.Errorf("devices = %v, want [dev2]", got)
	}
}

func TestBootID(t *testing.T) {
	tests := []struct {
		name        string
		stored, now string
		fnErr       error
		wantDropped []string
		wantKept    int
		wantStored  string // boot id in the file afterwards
	}{
		{"same boot", bootA, bootA, nil, nil, 2, bootA},
		{"reboot", bootA, bootB, nil, []string{"req-1", "req-2"}, 0, bootB},
		{"reboot, fn fails", bootA, bootB, errFn, []string{"req-1", "req-2"}, 0, bootA},
		{"stored boot id unknown", "", bootB, nil, nil, 2, bootB},
		{"current boot id unknown", bootA, "", nil, nil, 2, bootA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			st := store.NewState(tt.stored)
			// Inserted out of order: Dropped must still be sorted.
			st.Allocations["req-2"] = record("tty=2")
			st.Allocations["req-1"] = record("tty=1")
			seed(t, path, st)

			var seen *store.State
			err := disk.New(path, tt.now).Update(t.Context(), func(st *store.State) error {
				seen = st
				return tt.fnErr
			})
			if err != tt.fnErr {
				t.Fatalf("Update = %v, want %v", err, tt.fnErr)
			}
			if !slices.Equal(seen.Dropped, tt.wantDropped) || len(seen.Allocations) != tt.wantKept {
				t.Errorf("fn saw dropped %v and %d allocations, want %v and %d",
					seen.Dropped, len(seen.Allocations), tt.wantDropped, tt.wantKept)
			}
			// A fresh store that knows no boot id shows what was persisted.
			after := snapshot(t, disk.New(path, ""))
			wantKept := tt.wantKept
			if tt.fnErr != nil {
				wantKept = 2
			}
			if after.BootID != tt.wantStored || len(after.Allocations) != wantKept {
				t.Errorf("stored boot id %q with %d allocations, want %q with %d",
					after.BootID, len(after.Allocations), tt.wantStored, wantKept)
			}
		})
	}
}

func TestStaleTempRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	stale := []string{"p.json.tmp"}
	kept := []string{"p.json.lock", "other.json.tmp", "p.json.tmp.1"}
	for _, name := range slices.Concat(stale, kept) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	snapshot(t, disk.New(path, bootA))
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale %s: stat = %v, want it removed", name, err)
		}
	}
	for _, name := range kept {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
}

func TestContextDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "p.json")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := disk.New(path, bootA).Update(ctx, func(*store.State) error {
		t.Error("fn ran after the context was done")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update = %v, want context.Canceled", err)
	}
}

// TestGoroutines checks that Stores on the same path in one process exclude
// each other: flock locks belong to open files, not to processes.
func TestGoroutines(t *testing.T) {
	const workers, perWorker = 8, 10
	path := filepath.Join(t.TempDir(), "p.json")
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			s := disk.New(path, bootA)
			for range perWorker {
				if err := s.Update(t.Context(), increment); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n, err := counter(snapshot(t, disk.New(path, bootA)))
	if err != nil || n != workers*perWorker {
		t.Errorf("counter = %d, %v; want %d", n, err, workers*perWorker)
	}
}

// View reads without a lock and saves nothing: allocations of an earlier
// boot are left out of what it shows but stay in the file for the next
// Update to release; with no state it shows an empty one and creates
// nothing.
func TestViewNeitherLocksNorSaves(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tty", "p.json")
	var n int
	if err := disk.New(path, bootA).View(t.Context(), func(st *store.State) error { n = len(st.Allocations); return nil }); err != nil || n != 0 {
		t.Fatalf("View of no state: %d allocations, %v", n, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("View created %v", entries)
	}
	st := store.NewState(bootA)
	st.Allocations["req-1"] = record("tty=1")
	seed(t, path, st)
	before := readFile(t, path)
	if err := disk.New(path, bootB).View(t.Context(), func(st *store.State) error { n = len(st.Allocations); return nil }); err != nil || n != 0 {
		t.Fatalf("View after a reboot: %d allocations, %v; want the earlier boot's left out", n, err)
	}
	if after := readFile(t, path); !bytes.Equal(after, before) {
		t.Errorf("View changed the file")
	}
}

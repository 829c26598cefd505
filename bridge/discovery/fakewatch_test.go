package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// fakeWatcher is a Watcher a test drives: it records what is watched,
// fails Add for the directories in refuse, and delivers the events the
// test sends.
type fakeWatcher struct {
	mu      sync.Mutex
	watched map[string]bool
	adds    []string
	refuse  map[string]error
	events  chan string
	errs    chan error
}

func newFakeWatcher() *fakeWatcher {
	return &fakeWatcher{watched: map[string]bool{}, refuse: map[string]error{},
		events: make(chan string, 1000), errs: make(chan error, 1)}
}

func (f *fakeWatcher) Add(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refuse[dir]; err != nil {
		return err
	}
	f.watched[dir] = true
	f.adds = append(f.adds, dir)
	return nil
}

func (f *fakeWatcher) Remove(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.watched[dir] {
		return fmt.Errorf("%s: not watched", dir)
	}
	delete(f.watched, dir)
	return nil
}

func (f *fakeWatcher) Events() <-chan string { return f.events }
func (f *fakeWatcher) Errors() <-chan error  { return f.errs }
func (f *fakeWatcher) Close() error          { return nil }

// dirs is what is watched, sorted.
func (f *fakeWatcher) dirs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for d := range f.watched {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// ttyRoot is a fixture root whose dev/ holds empty files standing for the
// terminals ttyN of ns.
func ttyRoot(t testing.TB, ns ...int) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		plug(t, root, fmt.Sprintf("tty%d", n))
	}
	return root
}

// plug makes the node dev/name under root; unplug removes it.
func plug(t testing.TB, root, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, "dev", name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func unplug(t testing.TB, root, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(root, "dev", name)); err != nil {
		t.Fatal(err)
	}
}

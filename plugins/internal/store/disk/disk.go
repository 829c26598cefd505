package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gofrs/flock"

	"github.com/cdiexec/cdi/plugins/internal/store"
)

// fileMode is the mode of the state and lock files: root writes them, and
// anyone troubleshooting may read them.
const fileMode fs.FileMode = 0o644

// dirMode is the mode of the directories created for the state file:
// nobody but their owner may place a file or a link in them.
const dirMode fs.FileMode = 0o700

// Store is a store.Store kept in one JSON file. It holds no mutable state,
// so one Store may be used by several goroutines, and several processes may
// use the same path at once: the file lock serializes them all.
type Store struct {
	path   string
	bootID string
}

var _ store.Store = (*Store)(nil)

// New returns a Store that keeps its state in the file at path. bootID is
// the current kernel boot id; allocations stored under another boot id are
// dropped on load. An empty bootID means "unknown" and never drops anything.
func New(path, bootID string) *Store {
	return &Store{path: path, bootID: bootID}
}

// StatePath returns the state file of one plugin configuration:
// <stateDir>/<typ>/<plugin>.json.
func StatePath(stateDir, typ, plugin string) string {
	return filepath.Join(stateDir, typ, plugin+".json")
}

// Path returns the file the state is kept in.
func (s *Store) Path() string { return s.path }

// Update implements store.Store. It returns ctx.Err() if ctx is done before
// the lock is taken; once waiting for the lock, only the lock holder
// finishing (or this process being killed) ends the wait.
func (s *Store) Update(ctx context.Context, fn func(*store.State) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	// The wait for the lock may have been long: a caller that gave up
	// meanwhile must not have its change applied behind its back.
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.update(fn)
}

// View implements store.Store.
func (s *Store) View(ctx context.Context, fn func(*store.State) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st, _, err := s.load()
	if err != nil {
		return err
	}
	st.ReconcileBoot(s.bootID)
	st.Dropped = nil // not released: nothing is saved
	return fn(st)
}

// lock creates the state directory, checks that no one else can place
// files in it, and takes the exclusive lock on <path>.lock, blocking until
// it is free. A link at the lock's path is not followed: it is an error.
// The returned func releases the lock.
func (s *Store) lock() (func(), error) {
	dir := filepath.Dir(s.path)
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	// O_NOFOLLOW: a link placed at the lock's path fails the call
	// (ELOOP), rather than have the plugin create or lock a file that is
	// not its own.
	path := s.path + ".lock"
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW), flock.SetPermissions(fileMode))
	if err := fl.Lock(); err != nil {
		return nil, fmt.Errorf("lock state file %s: %w", path, err)
	}
	// Closing releases the lock. An error then is ignored: by then the
	// state is saved or not, and the kernel drops the lock at exit anyway.
	return func() { _ = fl.Close() }, nil
}

// update runs fn on the loaded state and saves the result if fn succeeded
// and the state changed. The caller holds the lock.
func (s *Store) update(fn func(*store.State) error) error {
	if err := removeStaleTemp(s.path); err != nil {
		return err
	}
	st, before, err := s.load()
	if err != nil {
		return err
	}
	after, err := store.Change(st, before, s.bootID, fn)
	if errors.Is(err, store.ErrUnsavable) {
		return fmt.Errorf("state file %s: %w", s.path, err)
	}
	if err != nil || after == nil {
		return err
	}
	// The directory is synced only where no boot id is known. A power
	// failure may undo an unsynced rename and bring back the previous
	// state, but it also reboots the machine: the previous state then
	// carries the old boot id like the lost one, and the next call releases
	// all of it either way. The file itself is always synced, since a
	// rename can outlive the data it points to and leave a torn file.
	return writeAtomic(s.path, after, s.bootID == "")
}

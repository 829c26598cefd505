// Package handover hands a node over from one bridge to the next: the
// old and the new pod of a DaemonSet's rolling update with maxSurge,
// which run side by side on one node. The bridge that holds a file lock
// on the host (Lock) writes the node's ResourceSlices and says, in a
// small record beside the lock (Record), what it serves; the other waits
// for the lock, and until it has it writes no slice and splits its
// pools between the front ends as the holder's record says.
//
// The lock is flock(2) on a file that is never removed. The kernel lets
// it go when the last descriptor of its holder closes, however the
// process ends (SIGKILL and the OOM killer included): a dead holder
// never keeps the node. The holder lets it go itself at a clean stop
// (Release), once its slice controller has stopped, and removes its
// record first.
//
// A lock at a path that others could swap is no lock: Open refuses a
// directory that anyone but its owner (root or this user) can write,
// and a lock or record file that is not a regular file (a link, a FIFO,
// a device). Records are read with a bound (MaxRecord).
package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/cdiexec/cdi/spec/atomicfile"
)

// Record is what the holder of a Lock says of itself, in the file beside
// the lock (RecordPath).
type Record struct {
	// DRAPools are the pools the holder serves through DRA (its
	// --dra-pools), sorted; none when it serves every pool through
	// device plugins.
	DRAPools []string `json:"draPools"`
	// PodUID is the holder's pod's UID, if it was told it.
	PodUID string `json:"podUID,omitempty"`
	// Host is the holder's host name: its pod's name in a pod.
	Host string `json:"host,omitempty"`
	// PID is the holder's process id, in its own PID namespace.
	PID int `json:"pid"`
	// Since is when it took the lock.
	Since time.Time `json:"since"`
}

// MaxRecord bounds the read of a record: a holder writes a few hundred
// bytes.
const MaxRecord = 64 << 10

// RetryDelay is how often Acquire tries the lock while another holds it.
const RetryDelay = 200 * time.Millisecond

// ErrUnsafe is wrapped by the error of a lock path that others could
// swap, or that names something other than a regular file.
var ErrUnsafe = errors.New("unsafe node lock")

// ErrReleased is wrapped by Acquire's error once Release was called.
var ErrReleased = errors.New("node lock released")

// Lock is the node's lock as one bridge holds it or waits for it.
type Lock struct {
	path string
	rec  Record
	fl   *flock.Flock
	held chan struct{}
	done chan struct{} // closed by Release

	mu       sync.Mutex
	holding  bool
	released bool
	lost     bool // Watch found the file locked no longer at the path
}

// RecordPath is the record beside the lock at path.
func RecordPath(path string) string { return path + ".json" }

// Open prepares the lock at path, making its directory if need be, and
// checks that no one else can swap it; it takes nothing. rec is what
// this process will record once it holds the lock (Since and PID are
// set then).
func Open(path string, rec Record) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("node lock: %w", err)
	}
	if err := checkDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := checkFile(path); err != nil {
		return nil, err
	}
	// Sorted, and [] rather than null for none.
	rec.DRAPools = append([]string{}, slices.Sorted(slices.Values(rec.DRAPools))...)
	// O_NOFOLLOW: a link placed at the path is an error, not followed;
	// O_NONBLOCK: a FIFO placed there is opened without waiting for a
	// writer, and then refused (claim).
	fl := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK),
		flock.SetPermissions(0o600))
	return &Lock{path: path, rec: rec, fl: fl, held: make(chan struct{}), done: make(chan struct{})}, nil
}

// Path is the lock's path.
func (l *Lock) Path() string { return l.path }

// TryAcquire takes the lock if no one holds it, and says whether this
// process holds it. Holding it, it writes its record; an error with held
// true is the record's: the lock is held all the same.
func (l *Lock) TryAcquire() (held bool, err error) {
	ok, err := l.fl.TryLock()
	if err != nil {
		return false, l.lockError(err)
	}
	if !ok {
		return false, nil
	}
	return l.claim()
}

// Acquire waits until this process holds the lock, trying every
// RetryDelay, or until ctx ends or Release is called. Its error, with
// the lock held, is the record's, as TryAcquire's.
func (l *Lock) Acquire(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-l.done:
			cancel(ErrReleased)
		case <-ctx.Done():
		}
	}()
	for {
		ok, err := l.fl.TryLockContext(ctx, RetryDelay)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("waiting for the node lock %s: %w", l.path, context.Cause(ctx))
		}
		if err != nil {
			return l.lockError(err)
		}
		if !ok {
			continue
		}
		held, err := l.claim()
		if held || err != nil {
			return err
		}
	}
}

// lockError names the lock in err, and says why a link or a FIFO was
// refused.
func (l *Lock) lockError(err error) error {
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%w: %s is a symbolic link: %w", ErrUnsafe, l.path, err)
	}
	return fmt.Errorf("node lock %s: %w", l.path, err)
}

// claim, with the flock taken, makes it this Lock's: unless the file
// locked is not the regular file at the path (it was swapped or removed
// meanwhile: held false, to try again), or Release was called. It writes
// the record and closes Held.
func (l *Lock) claim() (held bool, err error) {
	l.mu.Lock()
	holding := l.holding
	l.mu.Unlock()
	if holding {
		return true, nil
	}
	if err := l.sameFile(); err != nil {
		_ = l.fl.Unlock()
		if errors.Is(err, ErrUnsafe) {
			return false, err
		}
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		_ = l.fl.Unlock()
		return false, fmt.Errorf("node lock %s: %w", l.path, ErrReleased)
	}
	l.holding = true
	close(l.held)
	return true, l.writeRecord()
}

// sameFile is nil if the file locked is a regular file and still the one
// at the path; ErrUnsafe if it is not a regular file.
func (l *Lock) sameFile() error {
	locked, err := l.fl.Stat() // the open file's, while locked
	if err != nil {
		return err
	}
	if !locked.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is %s, not a regular file", ErrUnsafe, l.path, kind(locked.Mode()))
	}
	now, err := os.Lstat(l.path)
	if err != nil {
		return err
	}
	if !os.SameFile(locked, now) {
		return errors.New("the lock file was replaced")
	}
	return nil
}

// writeRecord writes this process's record; called holding the lock.
// The record there, a holder's that was killed, goes first: a write that
// fails (a full disk) leaves none, never the dead holder's, which a
// bridge waiting beside this one would split its pools by.
func (l *Lock) writeRecord() error {
	if err := os.Remove(RecordPath(l.path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("node lock held, the last holder's record not removed: %w", err)
	}
	rec := l.rec
	rec.PID, rec.Since = os.Getpid(), time.Now().UTC()
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	// Not synced: a record outlives no boot it matters to.
	if err := atomicfile.Write(RecordPath(l.path), data, atomicfile.Options{Perm: 0o644, NoSyncDir: true,
		Pattern: "." + filepath.Base(RecordPath(l.path)) + ".tmp*"}); err != nil {
		return fmt.Errorf("node lock held, its record not written: %w", err)
	}
	return nil
}

// ErrLost is wrapped by Watch's error when the file this process holds
// locked is no longer the one at the path: it was removed or replaced
// (the directory cleared and made again), and another process may now
// hold the path's new file.
var ErrLost = errors.New("node lock lost")

// Watch checks every period, once this process holds the lock, that the
// file it holds locked is still the one at the path. It returns an error
// wrapping ErrLost when it is not, and nil when ctx ends or the lock is
// released. A holder that lost its lock must stop writing what the lock
// guards: the bridge stops, and its restart waits for the lock anew.
func (l *Lock) Watch(ctx context.Context, period time.Duration) error {
	select {
	case <-ctx.Done():
		return nil
	case <-l.done:
		return nil
	case <-l.held:
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.done:
			return nil
		case <-tick.C:
		}
		if err := l.stillHeld(); err != nil {
			return err
		}
	}
}

// stillHeld is nil while this process holds the lock at the path, or no
// longer holds it at all (released); else the ErrLost of Watch, and the
// record at the path is no longer this process's to remove.
func (l *Lock) stillHeld() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.holding {
		return nil
	}
	if err := l.sameFile(); err != nil {
		l.lost = true
		return fmt.Errorf("%w: %s: %w", ErrLost, l.path, err)
	}
	return nil
}

// Held is closed once this process holds the lock; it stays closed after
// Release.
func (l *Lock) Held() <-chan struct{} { return l.held }

// Release lets the lock go, its record removed first, and ends a waiting
// Acquire; the Lock is not taken again. Safe to call more than once, and
// on a nil Lock.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.released {
		l.released = true
		close(l.done)
	}
	if !l.holding {
		return nil
	}
	l.holding = false
	if l.lost {
		return l.fl.Unlock() // the record at the path is another's
	}
	// Removed while held: never the next holder's.
	rmErr := os.Remove(RecordPath(l.path))
	if errors.Is(rmErr, os.ErrNotExist) {
		rmErr = nil
	}
	return errors.Join(rmErr, l.fl.Unlock())
}

// Holder reads the record of the lock's holder. Its error wraps
// os.ErrNotExist when there is none (no one holds the lock, or its
// holder has not yet written it). The record says what its writer
// serves; whether it holds the lock still only the lock says.
func (l *Lock) Holder() (Record, error) { return ReadRecord(RecordPath(l.path)) }

// ReadRecord reads the record at path: a regular file, never through a
// link, of at most MaxRecord bytes.
func ReadRecord(path string) (Record, error) {
	var rec Record
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return rec, fmt.Errorf("the node lock's record: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return rec, fmt.Errorf("the node lock's record: %w", err)
	} else if !fi.Mode().IsRegular() {
		return rec, fmt.Errorf("%w: the record %s is %s, not a regular file", ErrUnsafe, path, kind(fi.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxRecord+1))
	if err != nil {
		return rec, fmt.Errorf("the node lock's record: %w", err)
	}
	if len(data) > MaxRecord {
		return rec, fmt.Errorf("the node lock's record %s: larger than %d bytes", path, MaxRecord)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("the node lock's record %s: %w", path, err)
	}
	return rec, nil
}

// checkDir refuses a directory that anyone but its owner can write, or
// whose owner is neither root nor this user: they could swap the lock.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("node lock: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: no owner known", ErrUnsafe, dir)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: the directory %s is writable by others (%v): they could replace the lock", ErrUnsafe, dir, fi.Mode().Perm())
	}
	if uid := uint32(os.Geteuid()); st.Uid != 0 && st.Uid != uid {
		return fmt.Errorf("%w: the directory %s is owned by uid %d, neither root nor this user (%d)", ErrUnsafe, dir, st.Uid, uid)
	}
	return nil
}

// checkFile refuses a path that exists and is not a regular file of
// root or this user; one that does not exist yet is created by the first
// try. A lock file others may read is made 0600: whoever can open it can
// hold the lock (flock needs no write access).
func checkFile(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("node lock: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is %s, not a regular file", ErrUnsafe, path, kind(fi.Mode()))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if uid := uint32(os.Geteuid()); !ok || st.Uid != 0 && st.Uid != uid {
		return fmt.Errorf("%w: %s is owned by another user than root or this one (%d)", ErrUnsafe, path, uid)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return fmt.Errorf("node lock: %w", err)
		}
	}
	return nil
}

// kind names what a file that is not a regular file is.
func kind(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	default:
		return fmt.Sprintf("of type %v", m.Type())
	}
}

package handover_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cdiexec/cdi/bridge/internal/handover"
)

// envHold, set, makes the test binary a holder of the lock at its path
// (hold) instead of running the tests.
const envHold = "HANDOVER_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(envHold); path != "" {
		hold(path)
	}
	os.Exit(m.Run())
}

// hold takes the lock at path, says so on stdout and waits to be killed.
func hold(path string) {
	l, err := handover.Open(path, handover.Record{DRAPools: []string{"gpu"}, PodUID: "old-pod"})
	if err == nil {
		var held bool
		if held, err = l.TryAcquire(); err == nil && !held {
			err = errors.New("the lock is held")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	fmt.Println("held")
	for { // not select {}: the runtime would end a process with nothing left to run
		time.Sleep(time.Hour)
	}
}

// lockPath is a lock in a directory of the test's own.
func lockPath(t *testing.T) string { return filepath.Join(t.TempDir(), "bridge", "node.lock") }

func open(t *testing.T, path string, rec handover.Record) *handover.Lock {
	t.Helper()
	l, err := handover.Open(path, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release() })
	return l
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// One of two Locks of a path holds it, the other reads its record; once
// it is released, with its record, the other takes it.
func TestTryAcquire(t *testing.T) {
	path := lockPath(t)
	first := open(t, path, handover.Record{DRAPools: []string{"tty", "gpu"}, PodUID: "a"})
	second := open(t, path, handover.Record{PodUID: "b"})
	if held, err := first.TryAcquire(); !held || err != nil {
		t.Fatalf("first TryAcquire = %v, %v", held, err)
	}
	if held, err := first.TryAcquire(); !held || err != nil {
		t.Fatalf("TryAcquire again by the holder = %v, %v", held, err)
	}
	if !isClosed(first.Held()) || isClosed(second.Held()) {
		t.Fatalf("Held closed: first %v, second %v; want true, false", isClosed(first.Held()), isClosed(second.Held()))
	}
	if held, err := second.TryAcquire(); held || err != nil {
		t.Fatalf("second TryAcquire while the first holds = %v, %v", held, err)
	}
	rec, err := second.Holder()
	if err != nil {
		t.Fatal(err)
	}
	if rec.PodUID != "a" || rec.PID != os.Getpid() || !slices.Equal(rec.DRAPools, []string{"gpu", "tty"}) || time.Since(rec.Since) > time.Minute {
		t.Errorf("the holder's record %+v", rec)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Holder(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record once released: %v, want none", err)
	}
	if held, err := second.TryAcquire(); !held || err != nil {
		t.Fatalf("second TryAcquire once released = %v, %v", held, err)
	}
	if rec, err := first.Holder(); err != nil || rec.PodUID != "b" {
		t.Errorf("the record of the second = %+v, %v", rec, err)
	}
	if held, err := first.TryAcquire(); held || !errors.Is(err, handover.ErrReleased) && err != nil {
		t.Errorf("TryAcquire of a released Lock = %v, %v; want not held", held, err)
	}
}

// Acquire waits while another holds the lock, ends with its context or
// with Release, and returns once the lock is free.
func TestAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := lockPath(t)
		holder := open(t, path, handover.Record{})
		if held, err := holder.TryAcquire(); !held || err != nil {
			t.Fatalf("TryAcquire = %v, %v", held, err)
		}
		waiter := open(t, path, handover.Record{})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := waiter.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire while held, until its deadline: %v", err)
		}

		released := open(t, path, handover.Record{})
		done := make(chan error, 1)
		go func() { done <- released.Acquire(t.Context()) }()
		time.Sleep(time.Second)
		_ = released.Release()
		if err := <-done; !errors.Is(err, handover.ErrReleased) {
			t.Fatalf("Acquire ended by Release: %v", err)
		}

		go func() { done <- waiter.Acquire(t.Context()) }()
		time.Sleep(10 * time.Second)
		if isClosed(waiter.Held()) {
			t.Fatal("held while the holder holds")
		}
		start := time.Now()
		_ = holder.Release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > handover.RetryDelay || !isClosed(waiter.Held()) {
			t.Errorf("held %v after the release (Held closed: %v), want within %v", took, isClosed(waiter.Held()), handover.RetryDelay)
		}
	})
}

// The kernel frees the lock of a holder killed by SIGKILL, which never
// released it nor removed its record.
func TestKilledHolderFreesLock(t *testing.T) {
	path := lockPath(t)
	cmd := startHolder(t, path)
	l := open(t, path, handover.Record{PodUID: "new-pod"})
	if held, err := l.TryAcquire(); held || err != nil {
		t.Fatalf("TryAcquire while the child holds = %v, %v", held, err)
	}
	if rec, err := l.Holder(); err != nil || rec.PID != cmd.Process.Pid || rec.PodUID != "old-pod" {
		t.Fatalf("the holder's record %+v, %v; want pid %d", rec, err, cmd.Process.Pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := l.Acquire(ctx); err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	if rec, err := l.Holder(); err != nil || rec.PID != os.Getpid() || rec.PodUID != "new-pod" {
		t.Errorf("the record once taken over: %+v, %v", rec, err)
	}
}

// startHolder starts the test binary as a holder of the lock at path
// (hold: DRA pools [gpu], pod old-pod), and returns once it holds it.
func startHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHold+"="+path, "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the holder said %q, %v", line, err)
	}
	return cmd
}

// A lock that others could swap is refused, at Open or when it is taken,
// with an error that says why; nothing waits on a FIFO.
func TestUnsafeLock(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before makes dir and path unsafe before Open, after between
		// Open and TryAcquire.
		before, after func(t *testing.T, dir, path string)
		want          string
	}{
		{name: "symbolic link", before: symlink, want: "symbolic link"},
		{name: "FIFO", before: fifo, want: "not a regular file"},
		{name: "directory", before: func(t *testing.T, _, path string) { mkdir(t, path) }, want: "not a regular file"},
		{name: "directory writable by others", before: func(t *testing.T, dir, _ string) { chmod(t, dir, 0o777) }, want: "writable by others"},
		{name: "directory writable by its group", before: func(t *testing.T, dir, _ string) { chmod(t, dir, 0o775) }, want: "writable by others"},
		{name: "directory of another user", before: chownNobody, want: "owned by uid"},
		{name: "lock of another user", before: func(t *testing.T, dir, path string) {
			writeFile("")(t, dir, path)
			chownNobody(t, path, "")
		}, want: "owned by another user"},
		{name: "symbolic link after Open", after: symlink, want: "symbolic link"},
		{name: "FIFO after Open", after: fifo, want: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "node.lock")
			if tc.before != nil {
				tc.before(t, dir, path)
			}
			l, err := handover.Open(path, handover.Record{})
			if err == nil {
				defer l.Release()
				if tc.after != nil {
					tc.after(t, dir, path)
				}
				var held bool
				held, err = l.TryAcquire()
				if held {
					t.Fatal("held")
				}
			}
			if !errors.Is(err, handover.ErrUnsafe) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %v saying %q", err, handover.ErrUnsafe, tc.want)
			}
		})
	}
}

func symlink(t *testing.T, dir, path string) {
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

func fifo(t *testing.T, _, path string) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string) {
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// chownNobody gives dir to uid 65534; only root can.
func chownNobody(t *testing.T, dir, _ string) {
	if os.Geteuid() != 0 {
		t.Skip("only root can give a directory to another user")
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
}

// A record that is not one, too big, or not a regular file is an error,
// read within MaxRecord and never waiting on a FIFO; none is
// os.ErrNotExist.
func TestReadRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir, path string)
		want  error
		says  string
	}{
		{name: "none", write: func(*testing.T, string, string) {}, want: os.ErrNotExist},
		{name: "garbage", write: writeFile("\x00\xffnot json"), says: "invalid character"},
		{name: "huge", write: writeFile(`{"pid": 1, "host": "` + strings.Repeat("x", handover.MaxRecord) + `"}`), says: "larger than"},
		{name: "symbolic link", write: symlink, says: "too many levels of symbolic links"},
		{name: "FIFO", write: fifo, want: handover.ErrUnsafe},
		{name: "a record", write: writeFile(`{"draPools": ["gpu"], "pid": 7, "future": true}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "node.lock.json")
			tc.write(t, dir, path)
			rec, err := handover.ReadRecord(path)
			switch {
			case tc.want == nil && tc.says == "":
				if err != nil || rec.PID != 7 || !slices.Equal(rec.DRAPools, []string{"gpu"}) {
					t.Errorf("ReadRecord = %+v, %v", rec, err)
				}
			case tc.want != nil && !errors.Is(err, tc.want), tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("ReadRecord error %v, want %v %q", err, tc.want, tc.says)
			}
		})
	}
}

func writeFile(content string) func(t *testing.T, dir, path string) {
	return func(t *testing.T, _, path string) {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A lock file swapped for a FIFO while another holds the lock (the
// holder keeps the old file locked) is refused by the waiter, not taken
// as the lock.
func TestAcquireRefusesASwappedLock(t *testing.T) {
	path := lockPath(t)
	holder := open(t, path, handover.Record{})
	if held, err := holder.TryAcquire(); !held || err != nil {
		t.Fatalf("TryAcquire = %v, %v", held, err)
	}
	waiter := open(t, path, handover.Record{})
	done := make(chan error, 1)
	go func() { done <- waiter.Acquire(t.Context()) }()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	fifo(t, "", path)
	select {
	case err := <-done:
		if !errors.Is(err, handover.ErrUnsafe) || isClosed(waiter.Held()) {
			t.Errorf("Acquire of a lock swapped for a FIFO: %v (held: %v), want %v", err, isClosed(waiter.Held()), handover.ErrUnsafe)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waits 10 s after the lock was swapped for a FIFO")
	}
}

// A lock file others can read is made 0600 by Open: whoever can open it
// can hold the lock.
func TestOpenNarrowsTheLocksMode(t *testing.T) {
	path := lockPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	open(t, path, handover.Record{})
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the lock's mode after Open: %v, %v; want 0600", fi.Mode(), err)
	}
}

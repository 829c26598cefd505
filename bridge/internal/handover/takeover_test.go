package handover_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/internal/handover"
)

// A holder killed by SIGKILL (the OOM killer, a liveness kill past the
// grace) leaves its record (DRA pools [gpu], pod old-pod); the bridge
// that takes the lock over (no DRA pools: it serves gpu through its
// device plugins) and cannot write its own record (a full disk: here the
// file-size limit makes every write fail, as ENOSPC does) removes it all
// the same. Kept, a third bridge of the node (the kubelet restarting a
// pod, a second surge) would read it as its holder's and split the pools
// by it, serving gpu through DRA while the holder serves it through
// device plugins: one pool, two front ends.
func TestAKilledHoldersRecordGoesWithTheNextHolder(t *testing.T) {
	path := lockPath(t)
	cmd := startHolder(t, path)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	next := open(t, path, handover.Record{PodUID: "new-pod"})
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	full := lim
	full.Cur = 0
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		t.Fatal(err)
	}
	held, recErr := next.TryAcquire()
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	if !held || recErr == nil {
		t.Fatalf("TryAcquire with no room for the record = %v, %v; want held, the record's error", held, recErr)
	}

	third := open(t, path, handover.Record{PodUID: "third-pod", DRAPools: []string{"gpu"}})
	if held, err := third.TryAcquire(); held || err != nil {
		t.Fatalf("third TryAcquire = %v, %v; want not held", held, err)
	}
	rec, err := third.Holder()
	if err == nil && rec.PodUID == "old-pod" {
		t.Fatalf("while new-pod holds the lock, its waiter reads the record of the dead holder %+v (pid %d, killed): "+
			"it splits the pools by DRA pools %v that no live bridge serves through DRA", rec, cmd.Process.Pid, rec.DRAPools)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the holder's record: %v", err)
	}
}

// The lock's directory removed and made again (an operator clearing
// /var/lib/cdi/bridge, a host cleanup; the chart's hostPath is
// DirectoryOrCreate) while the old pod holds the lock and the new one
// waits: the waiter's next try opens the path anew and locks the fresh
// file, which no flock can prevent. The holder notices within a period
// of Watch (ErrLost), for its bridge to stop, and its Release then
// leaves the new holder's record alone.
func TestHolderNoticesItsLockRemoved(t *testing.T) {
	path := lockPath(t)
	holder := open(t, path, handover.Record{PodUID: "old-pod"})
	if held, err := holder.TryAcquire(); !held || err != nil {
		t.Fatalf("TryAcquire = %v, %v", held, err)
	}
	watched := make(chan error, 1)
	go func() { watched <- holder.Watch(t.Context(), 50*time.Millisecond) }()
	waiter := open(t, path, handover.Record{PodUID: "new-pod"})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	acquired := make(chan error, 1)
	go func() { acquired <- waiter.Acquire(ctx) }()
	time.Sleep(3 * handover.RetryDelay)
	dir := filepath.Dir(path)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-watched:
		if !errors.Is(err, handover.ErrLost) {
			t.Fatalf("Watch = %v, want ErrLost", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the holder did not notice that its lock's file was removed")
	}
	if err := <-acquired; err != nil {
		t.Fatalf("the waiter's Acquire of the new file: %v", err)
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	if rec, err := waiter.Holder(); err != nil || rec.PodUID != "new-pod" {
		t.Errorf("after the old holder's Release the record is %+v, %v; want the new holder's", rec, err)
	}
}

package handover_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/internal/handover"
)

// envAdversaryHold, set, makes TestAdversaryHolderChild a holder of the
// lock at its path that stays alive until it is killed (the package's
// own hold helper ends at once on Go's deadlock check, a crash rather
// than a kill).
const envAdversaryHold = "HANDOVER_ADVERSARY_HOLD"

// TestAdversaryHolderChild is the child process of the adversary tests:
// a holder with DRA pools [gpu], of pod old-pod. Skipped unless run as
// one.
func TestAdversaryHolderChild(t *testing.T) {
	path := os.Getenv(envAdversaryHold)
	if path == "" {
		t.Skip("only a child process of the adversary tests")
	}
	l, err := handover.Open(path, handover.Record{DRAPools: []string{"gpu"}, PodUID: "old-pod"})
	if err != nil {
		t.Fatal(err)
	}
	if held, err := l.TryAcquire(); !held || err != nil {
		t.Fatalf("TryAcquire = %v, %v", held, err)
	}
	fmt.Println("held")
	for {
		time.Sleep(time.Hour)
	}
}

// TestAdversaryStaleRecordOfAKilledHolder reproduces a holder killed by
// SIGKILL (the OOM killer, a liveness kill past the grace) that leaves its
// record (DRA pools [gpu], pod old-pod), and the bridge that takes the
// lock over (no DRA pools: it serves gpu through its device plugins)
// failing to write its own record (a full disk: here the file-size
// limit makes every write fail, as ENOSPC does). TryAcquire says the
// lock is held and the record not written, and cdi-bridge goes on
// serving. But the dead holder's record stays in place: a third bridge
// of the node (the kubelet restarting a pod, a second surge) reads it as
// its holder's and splits the pools by it, serving gpu through DRA while
// the holder serves it through device plugins: one pool, two front
// ends, one device handed out twice.
func TestAdversaryStaleRecordOfAKilledHolder(t *testing.T) {
	path := lockPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAdversaryHolderChild$")
	cmd.Env = append(os.Environ(), envAdversaryHold+"="+path, "GORACE=atexit_sleep_ms=0")
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

// TestAdversaryLockDirRecreatedWhileHeld reproduces the lock's directory
// removed and made again (an operator clearing /var/lib/cdi/bridge, a
// host cleanup; the chart's hostPath is DirectoryOrCreate) while the old
// pod holds the lock and the new one waits for it. The holder keeps its
// flock on the unlinked file and never looks at the path again; the
// waiter's next try opens the path anew, creates a fresh file and locks
// it: both hold the node's lock, and both write the node's
// ResourceSlices.
func TestAdversaryLockDirRecreatedWhileHeld(t *testing.T) {
	path := lockPath(t)
	holder := open(t, path, handover.Record{PodUID: "old-pod"})
	if held, err := holder.TryAcquire(); !held || err != nil {
		t.Fatalf("TryAcquire = %v, %v", held, err)
	}
	waiter := open(t, path, handover.Record{PodUID: "new-pod"})
	if held, err := waiter.TryAcquire(); held || err != nil {
		t.Fatalf("the waiter's TryAcquire = %v, %v", held, err)
	}
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
	if err := <-acquired; err == nil && isClosed(holder.Held()) {
		rec, _ := waiter.Holder()
		t.Fatalf("the waiter took the node lock while the holder still holds it (never released): two bridges write the node's slices; the record now says %+v", rec)
	}
}

//go:build unix

package disk_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/disk"
)

// Environment of a helper process: which helper to run, and its arguments.
const (
	envHelper = "DISK_TEST_HELPER" // "count" or "crash"
	envPath   = "DISK_TEST_PATH"
	envID     = "DISK_TEST_ID"
	envCount  = "DISK_TEST_COUNT"
)

// helperCmd returns a command running this test binary in the given helper
// mode on path.
func helperCmd(mode, path string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	// A race-enabled binary sleeps a second before exiting, to let other
	// goroutines report races; the children have no such goroutines.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), "GORACE="+gorace, envHelper+"="+mode, envPath+"="+path)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// TestHelperProcess is not a test: it is the body of the child processes
// the other tests start, selected by $DISK_TEST_HELPER.
func TestHelperProcess(t *testing.T) {
	var err error
	switch os.Getenv(envHelper) {
	case "":
		t.Skip("only run as a helper process")
	case "count":
		err = helperCount()
	case "crash":
		err = helperCrash()
	default:
		err = fmt.Errorf("unknown helper %q", os.Getenv(envHelper))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helperCount increments the shared counter $DISK_TEST_COUNT times, and
// with it a counter of its own in record c<$DISK_TEST_ID>: a lost update
// shows as a shared counter lower than the sum of the own ones.
func helperCount() error {
	n, err := strconv.Atoi(os.Getenv(envCount))
	if err != nil {
		return err
	}
	s, own := disk.New(os.Getenv(envPath), bootA), "c"+os.Getenv(envID)
	for range n {
		err := s.Update(context.Background(), func(st *store.State) error {
			rec := st.Allocations[own]
			if rec == nil {
				rec = &store.Record{Request: "0"}
				st.Allocations[own] = rec
			}
			mine, err := strconv.Atoi(rec.Request)
			if err != nil {
				return err
			}
			rec.Request = strconv.Itoa(mine + 1)
			return increment(st)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func TestProcesses(t *testing.T) {
	const procs, perProc = 32, 20
	path := filepath.Join(t.TempDir(), "p.json")
	start := time.Now()
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			cmd := helperCmd("count", path, envID+"="+strconv.Itoa(i), envCount+"="+strconv.Itoa(perProc))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("helper %d: %v\n%s", i, err, out)
			}
		})
	}
	wg.Wait()
	st := snapshot(t, disk.New(path, bootA))
	n, err := counter(st)
	if err != nil || n != procs*perProc {
		t.Errorf("counter = %d (%v), want %d: updates were lost", n, err, procs*perProc)
	}
	for i := range procs {
		if rec := st.Allocations["c"+strconv.Itoa(i)]; rec == nil || rec.Request != strconv.Itoa(perProc) {
			t.Errorf("process %d counted %v, want %d", i, rec, perProc)
		}
	}
	t.Logf("%d processes x %d updates in %v", procs, perProc, time.Since(start))
}

// Crash test states: generation g (in the counter record) has recordsFor(g)
// other records, each tagged "gen=<g>" and carrying payloadSize bytes, so
// that a torn or mixed write shows as a wrong count or tag. A state spans
// several pages, yet stays small: under the race detector JSON coding
// dominates an update, and a larger state makes a kill during the write
// (between creating the temporary file and renaming it) rarer, not likelier.
const payloadSize = 4000

func recordsFor(gen int) int { return 3 + gen%3 }

// nextGen replaces st, which must be consistent, with the next generation.
func nextGen(st *store.State) error {
	gen, err := checkGen(st)
	if err != nil {
		return err
	}
	gen++
	tag, payload := "gen="+strconv.Itoa(gen), strings.Repeat("x", payloadSize)
	st.Allocations = map[string]*store.Record{counterKey: {Request: strconv.Itoa(gen)}}
	for i := range recordsFor(gen) {
		st.Allocations[fmt.Sprintf("r%03d", i)] = &store.Record{Request: tag, Devices: []string{payload}}
	}
	return nil
}

// checkGen returns the generation of st, or why st is not one that nextGen
// can have written.
func checkGen(st *store.State) (int, error) {
	gen, err := counter(st)
	if err != nil || gen == 0 {
		if len(st.Allocations) != 0 {
			return 0, fmt.Errorf("no generation but %d records (%v)", len(st.Allocations), err)
		}
		return 0, err
	}
	if got, want := len(st.Allocations)-1, recordsFor(gen); got != want {
		return 0, fmt.Errorf("generation %d has %d records, want %d", gen, got, want)
	}
	tag := "gen=" + strconv.Itoa(gen)
	for key, rec := range st.Allocations {
		if key != counterKey && (rec.Request != tag || len(rec.Devices) != 1 || len(rec.Devices[0]) != payloadSize) {
			return 0, fmt.Errorf("generation %d has record %s of %s", gen, key, rec.Request)
		}
	}
	return gen, nil
}

// helperCrash writes generation after generation until it is killed. It
// says "ready" after the first one, so that kills land among the writes
// rather than during process start.
func helperCrash() error {
	s := disk.New(os.Getenv(envPath), bootA)
	for i := 0; ; i++ {
		if err := s.Update(context.Background(), nextGen); err != nil {
			return err
		}
		if i == 0 {
			fmt.Println("ready")
		}
	}
}

// TestCrashSafety kills writers at random moments and checks that the file
// always holds a whole state that was written, never a torn, mixed or
// older one. Two files are tortured in parallel: most of each round is
// process start, which does not load the CPU.
func TestCrashSafety(t *testing.T) {
	const files = 2
	kills := 200
	if testing.Short() {
		kills = 30
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DISK_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set DISK_TEST_SEED to repeat)", seed)
	for i := range uint64(files) {
		t.Run(fmt.Sprintf("file%d", i), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, i))
			crashLoop(t, filepath.Join(t.TempDir(), "p.json"), rng, kills/files)
		})
	}
}

// crashLoop runs and kills the crash helper on path kills times, checking
// the state after each kill.
func crashLoop(t *testing.T, path string, rng *rand.Rand, kills int) {
	start, lastGen, midWrite := time.Now(), 0, 0
	for i := range kills {
		// About two updates' time, so kills land in every phase of one.
		runAndKill(t, path, time.Duration(rng.Int64N(int64(30*time.Millisecond))))
		if _, err := os.Stat(path + ".tmp"); err == nil {
			midWrite++
		}
		gen, err := checkGen(snapshot(t, disk.New(path, bootA)))
		if err != nil {
			t.Fatalf("after kill %d: %v", i, err)
		}
		if gen < lastGen {
			t.Fatalf("after kill %d: generation went back from %d to %d", i, lastGen, gen)
		}
		lastGen = gen
		if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after kill %d: stale temporary file not removed: stat = %v", i, err)
		}
	}
	t.Logf("%d kills in %v, %d of them mid-write (left a temporary file), reached generation %d",
		kills, time.Since(start), midWrite, lastGen)
}

// runAndKill starts the crash helper on path and SIGKILLs it delay after
// it is ready.
func runAndKill(t *testing.T, path string, delay time.Duration) {
	t.Helper()
	cmd := helperCmd("crash", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper did not get ready: %q, %v\n%s", line, err, stderr.String())
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, not by the kill\n%s", err, stderr.String())
	}
}

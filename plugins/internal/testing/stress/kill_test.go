package stress

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"reflect"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
)

// TestKillDuringAddDel kills ADD and DEL processes with SIGKILL at random
// instants, many of them in the middle of writing the state, and checks
// after each kill that the state still parses, that every allocation in it
// is whole, and that the killed request is either wholly there or wholly
// absent while every other allocation is untouched.
func TestKillDuringAddDel(t *testing.T) {
	const capacity = 2
	conf := conf(t, capacity)
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	span := killSpan(t, conf)
	live := map[string]spec.AddResult{} // what LIST held after the last round
	outcomes := map[string]int{}
	for i := range rounds {
		id, n, del := pick(live, i)
		cmd := start(t, conf, id, n, del)
		time.Sleep(rand.N(span))
		_ = cmd.Process.Kill() // SIGKILL; fails harmlessly if it already exited
		_ = cmd.Wait()
		outcomes[outcome(cmd, del)]++
		live = checkAfterKill(t, conf, capacity, live, id, n, del, i)
	}
	t.Logf("%d rounds, kills after 0-%v: %v; %d allocations left", rounds, span, outcomes, len(live))
	if outcomes["ADD killed"] == 0 || outcomes["ADD completed"] == 0 {
		t.Errorf("the kills did not spread over the run of ADD: %v", outcomes)
	}
}

// start launches ADD tty:n for id, or DEL of id, as a process of its own:
// the test needs the *exec.Cmd to kill it.
func start(t *testing.T, conf []byte, id string, n int, del bool) *exec.Cmd {
	t.Helper()
	cmd := command(conf, id, n, del)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// command is ADD tty:n for id, or DEL of id, with only the protocol's
// environment, not yet started.
func command(conf []byte, id string, n int, del bool) *exec.Cmd {
	cmd := exec.Command(plugin)
	cmd.Env = []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=tty:%d", n), "CDI_REQUEST_ID=" + id}
	if del {
		cmd.Env = []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=DEL", "CDI_REQUEST_ID=" + id}
	}
	cmd.Stdin = bytes.NewReader(conf)
	return cmd
}

// checkAfterKill checks the state after the round that targeted id and
// returns it as the next round's baseline.
func checkAfterKill(t *testing.T, conf []byte, capacity int, before map[string]spec.AddResult, id string, n int, del bool, round int) map[string]spec.AddResult {
	t.Helper()
	state := list(t, conf, capacity) // fails on code 13: the state must always parse
	for rid, a := range state {
		if err := complete(a); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if prev, ok := before[rid]; rid != id && (!ok || !reflect.DeepEqual(prev, a.Result)) {
			t.Fatalf("round %d, targeting %s: %s changed from %+v to %+v", round, id, rid, prev, a.Result)
		}
	}
	for rid := range before {
		if _, ok := state[rid]; !ok && rid != id {
			t.Fatalf("round %d, targeting %s: %s vanished", round, id, rid)
		}
	}
	if a, ok := state[id]; ok {
		switch {
		case del && !reflect.DeepEqual(a.Result, before[id]):
			t.Fatalf("round %d: DEL %s left %+v, not the whole of %+v", round, id, a.Result, before[id])
		case !del && a.Request != fmt.Sprintf("tty:%d", n):
			t.Fatalf("round %d: ADD %s tty:%d recorded request %q", round, id, n, a.Request)
		}
	}
	return results(state)
}

// killSpan is the range of kill delays: at least the 0-3 ms asked for, and
// 1.5 times the median ADD here if that is longer, so that the kills cover
// the plugin's whole run, the state's write and sync included, on a slow
// or loaded machine as well.
func killSpan(t *testing.T, conf []byte) time.Duration {
	var times []time.Duration
	for i := range 11 {
		id := fmt.Sprintf("probe%d", i)
		begin := time.Now()
		if out, err := command(conf, id, 1, false).Output(); err != nil {
			t.Fatalf("probe ADD: %v %s", err, out)
		}
		times = append(times, time.Since(begin))
		if err := command(conf, id, 0, true).Run(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(times)
	return max(3*time.Millisecond, times[len(times)/2]*3/2)
}

func outcome(cmd *exec.Cmd, del bool) string {
	op := "ADD"
	if del {
		op = "DEL"
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return op + " killed"
	}
	return op + " completed"
}

// pick chooses the next operation: DEL of a live request half the time
// when there is one, else ADD of a new request of 1-3 terminals.
func pick(live map[string]spec.AddResult, round int) (id string, n int, del bool) {
	if len(live) > 0 && rand.IntN(2) == 0 {
		ids := make([]string, 0, len(live))
		for id := range live {
			ids = append(ids, id)
		}
		id := ids[rand.IntN(len(ids))]
		return id, len(live[id].Units), true
	}
	return fmt.Sprintf("k%d", round), 1 + rand.IntN(3), false
}

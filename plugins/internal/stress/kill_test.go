package stress

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestKillDuringAddDel kills ADD and DEL processes with SIGKILL at random
// instants, many of them in the middle of writing the state, and checks
// after each kill that the state still parses and that the killed
// request is either wholly there or wholly absent.
func TestKillDuringAddDel(t *testing.T) {
	const capacity = 2
	conf := conf(t, capacity)
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	live := map[string]int{} // request-id -> units it asked for
	span := addDuration(t, conf)
	outcomes := map[string]int{}
	for i := 0; i < rounds; i++ {
		id, n, del := pick(live, i)
		cmd := exec.Command(plugin)
		cmd.Env = []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=ADD", fmt.Sprintf("CDI_REQUEST=tty:%d", n), "CDI_REQUEST_ID=" + id}
		if del {
			cmd.Env = []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=DEL", "CDI_REQUEST_ID=" + id}
		}
		cmd.Stdin = bytes.NewReader(conf)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Anywhere from before the plugin reads stdin to after it exits.
		time.Sleep(time.Duration(rand.Int64N(int64(span))))
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		outcomes[outcome(cmd, del)]++
		state := list(t, conf, capacity)
		got, present := state[id]
		switch {
		case present && len(got.Units) != n:
			t.Fatalf("round %d: %s holds %d of its %d units", i, id, len(got.Units), n)
		case present:
			live[id] = n
		default:
			delete(live, id)
		}
		if len(state) != len(live) {
			t.Fatalf("round %d: LIST has %d allocations, %d expected", i, len(state), len(live))
		}
	}
	t.Logf("%d rounds over 0-%v each: %v; %d allocations left", rounds, span, outcomes, len(live))
	if outcomes["ADD killed"] == 0 || outcomes["ADD completed"] == 0 {
		t.Errorf("the kills did not spread over the run of ADD: %v", outcomes)
	}
}

// addDuration is 1.5 times the median time of a whole ADD+DEL exec here,
// so that the kill delays cover the plugin's entire run, writes included.
func addDuration(t *testing.T, conf []byte) time.Duration {
	var times []time.Duration
	for i := 0; i < 11; i++ {
		start := time.Now()
		cmd := exec.Command(plugin)
		cmd.Env = []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1", fmt.Sprintf("CDI_REQUEST_ID=probe%d", i)}
		cmd.Stdin = bytes.NewReader(conf)
		if out, err := cmd.Output(); err != nil {
			t.Fatalf("probe ADD: %v %s", err, out)
		}
		times = append(times, time.Since(start))
		del := exec.Command(plugin)
		del.Env = []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=DEL", fmt.Sprintf("CDI_REQUEST_ID=probe%d", i)}
		del.Stdin = bytes.NewReader(conf)
		if err := del.Run(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(times)
	return times[len(times)/2] * 3 / 2
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
func pick(live map[string]int, round int) (id string, n int, del bool) {
	if len(live) > 0 && rand.IntN(2) == 0 {
		for id, n := range live {
			return id, n, true
		}
	}
	return fmt.Sprintf("k%d", round), 1 + rand.IntN(3), false
}

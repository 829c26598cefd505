package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/exectest"
	"github.com/cdiexec/cdi/spec"
)

// ledger is what the test knows of who holds which unit. A holder's units
// are marked releasing before its DEL starts, since the plugin may free
// them any time after that; a unit handed out while its holder is live
// and not releasing is a double handout.
type ledger struct {
	mu        sync.Mutex
	holder    map[unit]string
	releasing map[string]bool
	kept      map[string]spec.AddResult
}

func (l *ledger) added(t *testing.T, id string, r spec.AddResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range units(r) {
		if other, held := l.holder[u]; held && !l.releasing[other] {
			t.Errorf("%v handed to %s while %s held it", u, id, other)
		}
		l.holder[u] = id
	}
}

func (l *ledger) release(id string, done bool, r spec.AddResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !done {
		l.releasing[id] = true
		return
	}
	for _, u := range units(r) {
		if l.holder[u] == id {
			delete(l.holder, u)
		}
	}
	delete(l.releasing, id)
}

func TestConcurrentAddDel(t *testing.T) {
	for _, capacity := range []int{1, 2} {
		t.Run(fmt.Sprintf("capacity %d", capacity), func(t *testing.T) { concurrentAddDel(t, capacity) })
	}
}

func concurrentAddDel(t *testing.T, capacity int) {
	conf := conf(t, capacity)
	l := &ledger{holder: map[unit]string{}, releasing: map[string]bool{}, kept: map[string]spec.AddResult{}}
	run := 3 * time.Second
	if testing.Short() {
		run = time.Second
	}
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	var ops, full int
	var countMu sync.Mutex
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				okAdds, denied := worker(t, conf, l, fmt.Sprintf("w%d-%d", w, i))
				countMu.Lock()
				ops, full = ops+okAdds, full+denied
				countMu.Unlock()
			}
		}()
	}
	stop := make(chan struct{})
	go snapshots(t, conf, capacity, stop)
	wg.Wait()
	close(stop)
	t.Logf("%d ADDs granted, %d denied for lack of terminals, %d kept to the end", ops, full, len(l.kept))
	if ops == 0 || full == 0 {
		t.Errorf("no contention: %d granted, %d denied", ops, full)
	}
	checkFinal(t, conf, capacity, l)
}

// worker does one ADD of 1-3 terminals and, most of the time, its DEL.
func worker(t *testing.T, conf []byte, l *ledger, id string) (granted, denied int) {
	n := 1 + rand.IntN(3)
	r, err := exectest.RunE(context.Background(), plugin, env("ADD", "CDI_REQUEST", fmt.Sprintf("tty:%d", n), "CDI_REQUEST_ID", id), conf)
	if err != nil {
		t.Error(err)
		return 0, 0
	}
	if r.Code() == int(spec.CodeInsufficientResources) {
		return 0, 1
	}
	var res spec.AddResult
	r.Decode(t, &res)
	if r.Status != 0 || len(res.Units) != n {
		t.Errorf("ADD %s tty:%d: status %d, %s", id, n, r.Status, r.Stdout)
		return 0, 0
	}
	l.added(t, id, res)
	if rand.IntN(50) == 0 {
		l.mu.Lock()
		l.kept[id] = res
		l.mu.Unlock()
		return 1, 0
	}
	l.release(id, false, res)
	d, err := exectest.RunE(context.Background(), plugin, env("DEL", "CDI_REQUEST_ID", id), conf)
	if err != nil || d.Status != 0 || len(d.Stdout) != 0 {
		t.Errorf("DEL %s: %v, status %d, %s", id, err, d.Status, d.Stdout)
	}
	l.release(id, true, res)
	return 1, 0
}

// snapshots runs LIST while the workers run: each must be consistent.
func snapshots(t *testing.T, conf []byte, capacity int, stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
			list(t, conf, capacity)
		}
	}
}

func checkFinal(t *testing.T, conf []byte, capacity int, l *ledger) {
	got := list(t, conf, capacity)
	if len(got) != len(l.kept) {
		t.Errorf("LIST has %d allocations, the test kept %d", len(got), len(l.kept))
	}
	for id, want := range l.kept {
		if have, ok := got[id]; !ok || !reflect.DeepEqual(have, want) {
			t.Errorf("LIST for %s = %+v, ADD returned %+v", id, have, want)
		}
		d := exectest.Run(t, plugin, env("DEL", "CDI_REQUEST_ID", id), conf)
		if d.Status != 0 || len(d.Stdout) != 0 {
			t.Errorf("DEL %s: %s", id, d.Stdout)
		}
	}
	if left := list(t, conf, capacity); len(left) != 0 {
		t.Errorf("after every DEL, LIST still has %v", left)
	}
}

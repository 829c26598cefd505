package stress

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

const (
	workers = 64
	// maxKept bounds the allocations kept to the end, so that they prove
	// LIST right without exhausting the 16 terminals for everyone else.
	maxKept = 4
)

// ledger is what the test knows of who holds which unit. A holder is
// marked releasing before its DEL starts, since the plugin may free its
// units any time after that; a unit handed out while its holder is live
// and not releasing is a double handout.
type ledger struct {
	mu        sync.Mutex
	holder    map[unit]string
	releasing map[string]bool
	kept      map[string]spec.AddResult
}

func newLedger() *ledger {
	return &ledger{holder: map[unit]string{}, releasing: map[string]bool{}, kept: map[string]spec.AddResult{}}
}

// added records the units ADD returned for id, once ADD has returned.
func (l *ledger) added(id string, r spec.AddResult) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range units(r) {
		if other, held := l.holder[u]; held && !l.releasing[other] {
			return fmt.Errorf("%v handed to %s while %s held it", u, id, other)
		}
		l.holder[u] = id
	}
	return nil
}

// keep reports whether id should stay allocated to the end. Only
// single-terminal allocations are kept, and at most maxKept of them.
func (l *ledger) keep(id string, r spec.AddResult) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(r.Units) != 1 || len(l.kept) >= maxKept {
		return false
	}
	l.kept[id] = r
	return true
}

func (l *ledger) startRelease(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releasing[id] = true
}

// released forgets id's units once its DEL has returned; a unit already
// handed to someone else meanwhile stays theirs.
func (l *ledger) released(id string, r spec.AddResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range units(r) {
		if l.holder[u] == id {
			delete(l.holder, u)
		}
	}
	delete(l.releasing, id)
}

// counts are the operations done, for the log and the contention check.
type counts struct{ granted, denied, dels, lists atomic.Int64 }

func TestConcurrentAddDel(t *testing.T) {
	for _, capacity := range []int{1, 2} {
		t.Run(fmt.Sprintf("capacity %d", capacity), func(t *testing.T) { concurrentAddDel(t, capacity) })
	}
}

func concurrentAddDel(t *testing.T, capacity int) {
	conf := conf(t, capacity)
	l, c := newLedger(), &counts{}
	run := 3 * time.Second
	if testing.Short() {
		run = time.Second
	}
	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				cycle(t, conf, l, c, fmt.Sprintf("w%d-%d", w, i))
			}
		}()
	}
	stop := make(chan struct{})
	var snap sync.WaitGroup
	snap.Add(1)
	go func() { defer snap.Done(); snapshots(t, conf, capacity, c, stop) }()
	wg.Wait()
	close(stop)
	// A snapshot still running must not report after the test has ended.
	snap.Wait()
	t.Logf("%d ADDs granted, %d denied (code 10), %d DELs, %d LIST snapshots, %d kept to the end",
		c.granted.Load(), c.denied.Load(), c.dels.Load(), c.lists.Load(), len(l.kept))
	if c.granted.Load() == 0 || c.denied.Load() == 0 || c.lists.Load() == 0 {
		t.Errorf("no contention or no snapshots: %d granted, %d denied, %d LISTs", c.granted.Load(), c.denied.Load(), c.lists.Load())
	}
	checkFinal(t, conf, capacity, l)
}

// cycle does one ADD of 1-3 terminals and, unless it is kept, its DEL.
// It runs on a worker goroutine, so it reports with t.Error, never Fatal.
func cycle(t *testing.T, conf []byte, l *ledger, c *counts, id string) {
	n := 1 + rand.IntN(3)
	res, ok, err := add(conf, id, n)
	switch {
	case err != nil:
		t.Error(err)
		return
	case !ok:
		c.denied.Add(1)
		return
	}
	c.granted.Add(1)
	if err := l.added(id, res); err != nil {
		t.Error(err)
	}
	if l.keep(id, res) {
		return
	}
	l.startRelease(id)
	if err := del(conf, id); err != nil {
		t.Error(err)
	}
	c.dels.Add(1)
	l.released(id, res)
}

// add runs ADD tty:n. It returns ok=false for code 10, the one failure
// that contention excuses, and an error for anything else that is not a
// complete result.
func add(conf []byte, id string, n int) (spec.AddResult, bool, error) {
	var res spec.AddResult
	req := fmt.Sprintf("tty:%d", n)
	r, err := exectest.RunE(context.Background(), plugin, env("ADD", "CDI_REQUEST", req, "CDI_REQUEST_ID", id), conf)
	switch {
	case err != nil:
		return res, false, err
	case r.Status == 1 && r.Code() == int(spec.CodeInsufficientResources):
		return res, false, nil
	case r.Status != 0 || r.Code() != 0:
		return res, false, fmt.Errorf("ADD %s %s: status %d, %s %s", id, req, r.Status, r.Stdout, r.Stderr)
	}
	if err := json.Unmarshal(r.Stdout, &res); err != nil {
		return res, false, fmt.Errorf("ADD %s: %w", id, err)
	}
	return res, true, complete(spec.Allocation{RequestID: id, Request: req, Result: res})
}

// del runs DEL, which succeeds with status 0 and nothing on stdout.
func del(conf []byte, id string) error {
	r, err := exectest.RunE(context.Background(), plugin, env("DEL", "CDI_REQUEST_ID", id), conf)
	if err != nil {
		return err
	}
	if r.Status != 0 || len(r.Stdout) != 0 {
		return fmt.Errorf("DEL %s: status %d, %s %s", id, r.Status, r.Stdout, r.Stderr)
	}
	return nil
}

// snapshots runs LIST every 100 ms while the workers run: each state the
// plugin reports, however busy, must be consistent on its own.
func snapshots(t *testing.T, conf []byte, capacity int, c *counts, stop chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := listE(conf, capacity); err != nil {
				t.Error(err)
			}
			c.lists.Add(1)
		}
	}
}

// checkFinal: once the workers are done, LIST is exactly the kept
// allocations with the results ADD returned; after their DELs it is empty.
func checkFinal(t *testing.T, conf []byte, capacity int, l *ledger) {
	if len(l.kept) == 0 {
		t.Error("no allocation was kept: the final LIST proves nothing")
	}
	if got := results(list(t, conf, capacity)); !reflect.DeepEqual(got, l.kept) {
		t.Errorf("LIST at the end = %+v\nkept by the test = %+v", got, l.kept)
	}
	for id := range l.kept {
		if err := del(conf, id); err != nil {
			t.Error(err)
		}
	}
	if left := list(t, conf, capacity); len(left) != 0 {
		t.Errorf("after every DEL, LIST still has %v", left)
	}
}

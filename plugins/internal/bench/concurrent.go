package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// contention is the result of the 64-process run.
type contention struct {
	execs, granted, denied, doubles int
	elapsed                         time.Duration
}

// ledger records who holds which unit. Units are marked releasing before
// a DEL starts, because the plugin may free them from then on; a unit
// handed out while a holder has it and is not releasing it is a double
// handout.
type ledger struct {
	mu        sync.Mutex
	holder    map[string]string
	releasing map[string]bool
	doubles   int
}

type addResult struct {
	Code  int `json:"code"`
	Units []struct {
		Device string `json:"device"`
		Slot   int    `json:"slot"`
	} `json:"units"`
}

func (r addResult) keys() []string {
	out := make([]string, len(r.Units))
	for i, u := range r.Units {
		out[i] = fmt.Sprintf("%s/%d", u.Device, u.Slot)
	}
	return out
}

func (l *ledger) add(id string, r addResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range r.keys() {
		if other, held := l.holder[k]; held && !l.releasing[other] {
			l.doubles++
		}
		l.holder[k] = id
	}
}

func (l *ledger) release(id string, r addResult, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !done {
		l.releasing[id] = true
		return
	}
	for _, k := range r.keys() {
		if l.holder[k] == id {
			delete(l.holder, k)
		}
	}
	delete(l.releasing, id)
}

// contend runs 64 workers doing ADD tty:1 and DEL on one state file for d.
func contend(ctx context.Context, bin string, conf []byte, d time.Duration) (contention, error) {
	l := &ledger{holder: map[string]string{}, releasing: map[string]bool{}}
	var mu sync.Mutex
	var c contention
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < d; i++ {
				execs, granted, err := cycle(ctx, bin, conf, l, fmt.Sprintf("c%d-%d", w, i))
				mu.Lock()
				c.execs, c.granted = c.execs+execs, c.granted+granted
				c.denied += execs - 2*granted
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	c.elapsed, c.doubles = time.Since(start), l.doubles
	return c, firstErr
}

// cycle is one ADD and, if granted, its DEL: it returns the execs made
// and whether the ADD was granted. Code 10 (no terminal free) is the only
// acceptable failure.
func cycle(ctx context.Context, bin string, conf []byte, l *ledger, id string) (int, int, error) {
	base := []string{"CDI_VERSION=0.1.0", "CDI_REQUEST_ID=" + id}
	out, err := call(ctx, bin, append(base, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1"), conf)
	var r addResult
	if err != nil {
		if jerr := json.Unmarshal(out, &r); jerr == nil && r.Code == 10 {
			return 1, 0, nil
		}
		return 1, 0, err
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return 1, 0, err
	}
	l.add(id, r)
	l.release(id, r, false)
	_, err = call(ctx, bin, append(base, "CDI_COMMAND=DEL"), conf)
	l.release(id, r, true)
	return 2, 1, err
}

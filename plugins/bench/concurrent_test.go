package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// workers is how many plugin processes contend for the state file.
const workers = 64

// codeInsufficient is SPEC.md's code 10: not enough free slots.
const codeInsufficient = 10

// contention is the result of the 64-process run.
type contention struct {
	terminals             int
	ok, insufficient, del int
	elapsed               time.Duration
	doubles, leftOver     int
}

// addResult is the part of an ADD result or error document the run reads.
type addResult struct {
	Code  int `json:"code"`
	Units []struct {
		Device string `json:"device"`
		Slot   int    `json:"slot"`
	} `json:"units"`
}

// contend runs the workers doing ADD tty:1 then DEL on one state file for
// d, then checks that LIST is empty. It fails only on an unexpected plugin
// error; double handouts and left-overs are in the result.
func contend(ctx context.Context, bin string, conf []byte, d time.Duration) (contention, error) {
	var c contention
	var err error
	if c.terminals, err = countSlots(ctx, bin, conf, "tty"); err != nil {
		return c, err
	}
	l := newLedger()
	var (
		mu       sync.Mutex
		firstErr error
		stop     atomic.Bool // set on the first error; in-flight DELs finish
		wg       sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := 0; !stop.Load() && time.Since(start) < d; i++ {
				granted, err := cycle(ctx, bin, conf, l, fmt.Sprintf("c%d-%d", w, i))
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					stop.Store(true)
				}
				c.record(granted, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	c.elapsed, c.doubles = time.Since(start), l.doubles
	if firstErr != nil {
		return c, firstErr
	}
	c.leftOver, err = countAllocations(ctx, bin, conf)
	return c, err
}

// record counts one cycle: a granted ADD was followed by its DEL.
func (c *contention) record(granted bool, err error) {
	switch {
	case err != nil:
	case granted:
		c.ok++
		c.del++
	default:
		c.insufficient++
	}
}

// cycle is one ADD and, if granted, its DEL, and reports whether the ADD
// was granted. Code 10 (no terminal free) is the only acceptable failure.
func cycle(ctx context.Context, bin string, conf []byte, l *ledger, id string) (bool, error) {
	base := []string{"CDI_VERSION=0.1.0", "CDI_REQUEST_ID=" + id}
	out, err := call(ctx, bin, append(base, "CDI_COMMAND=ADD", "CDI_REQUEST=tty:1"), conf)
	var r addResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return false, errors.Join(err, fmt.Errorf("ADD %s: %w", id, jerr))
	}
	if err != nil {
		if r.Code == codeInsufficient {
			return false, nil
		}
		return false, err
	}
	keys := r.keys()
	l.acquire(id, keys)
	// From here on the plugin may free the terminal: another ADD may
	// legally get it before this DEL returns.
	l.releasing(id)
	if err := delCall(ctx, bin, conf, id); err != nil {
		return true, err
	}
	l.released(id, keys)
	return true, nil
}

func (r addResult) keys() []string {
	out := make([]string, len(r.Units))
	for i, u := range r.Units {
		out[i] = fmt.Sprintf("%s/%d", u.Device, u.Slot)
	}
	return out
}

// countSlots returns INFO's total of slots for resource.
func countSlots(ctx context.Context, bin string, conf []byte, resource string) (int, error) {
	out, err := call(ctx, bin, []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=INFO"}, conf)
	if err != nil {
		return 0, err
	}
	var info map[string]any
	if err := json.Unmarshal(out, &info); err != nil {
		return 0, fmt.Errorf("INFO: %w", err)
	}
	n, _ := info[resource].(float64)
	return int(n), nil
}

// countAllocations returns how many allocations LIST shows.
func countAllocations(ctx context.Context, bin string, conf []byte) (int, error) {
	out, err := call(ctx, bin, []string{"CDI_VERSION=0.1.0", "CDI_COMMAND=LIST"}, conf)
	if err != nil {
		return 0, err
	}
	var list struct {
		Allocations *[]json.RawMessage `json:"allocations"`
	}
	if err := json.Unmarshal(out, &list); err != nil || list.Allocations == nil {
		return 0, fmt.Errorf("LIST gave no allocations member: %q (%w)", out, err)
	}
	return len(*list.Allocations), nil
}

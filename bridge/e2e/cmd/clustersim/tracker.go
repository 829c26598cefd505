package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// tracker times changes reaching the simulated nodes' stores. Each store
// has a goroutine on its Changes() feed that, on every wake-up, checks
// the changes that store does not show yet: a check per wake-up rather
// than a poll, which at a millisecond over fifty stores would cost more
// CPU than the stores themselves. A time seen is when that check ran, so
// it includes the goroutine's scheduling delay on a busy machine.
type tracker struct {
	stores []*kube.Store
	mu     sync.Mutex
	open   map[*change]bool
	wg     sync.WaitGroup
	stop   context.CancelFunc
}

// change is one write followed to every store but its maker's.
type change struct {
	// shows reports whether store i shows the change. It runs on store i's
	// goroutine only, so it may keep state per store.
	shows func(i int, s *kube.Store) bool
	seen  []bool
	left  int
	last  time.Time // when the last store was seen to show it
	done  chan struct{}
}

// newTracker follows stores until stop.
func newTracker(ctx context.Context, stores []*kube.Store) *tracker {
	ctx, cancel := context.WithCancel(ctx)
	t := &tracker{stores: stores, open: map[*change]bool{}, stop: cancel}
	for i, s := range stores {
		// Subscribed here, not in the goroutine, so that no change made
		// after newTracker returns can slip past it.
		ch, unsubscribe := s.Changes()
		t.wg.Go(func() {
			defer unsubscribe()
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					t.check(i)
				}
			}
		})
	}
	return t
}

// close stops the goroutines and waits for them.
func (t *tracker) close() {
	t.stop()
	t.wg.Wait()
}

// add follows a change about to be made by store maker (-1: none of
// them); call it before the write, so that a store that shows the change
// before the write returns is seen to.
func (t *tracker) add(maker int, shows func(int, *kube.Store) bool) *change {
	c := &change{shows: shows, seen: make([]bool, len(t.stores)), left: len(t.stores), done: make(chan struct{})}
	if maker >= 0 {
		c.seen[maker] = true
		c.left--
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.left == 0 {
		close(c.done)
	} else {
		t.open[c] = true
	}
	return c
}

// drop stops following a change that was not made.
func (t *tracker) drop(c *change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.open, c)
}

// check runs on store i's goroutine after a wake-up.
func (t *tracker) check(i int) {
	t.mu.Lock()
	var todo []*change
	for c := range t.open {
		if !c.seen[i] {
			todo = append(todo, c)
		}
	}
	t.mu.Unlock()
	for _, c := range todo {
		if !c.shows(i, t.stores[i]) {
			continue
		}
		now := time.Now()
		t.mu.Lock()
		c.seen[i], c.last = true, now
		if c.left--; c.left == 0 {
			delete(t.open, c)
			close(c.done)
		}
		t.mu.Unlock()
	}
}

// wait waits until every store shows c, or timeout, and returns when the
// last one was seen to.
func (t *tracker) wait(ctx context.Context, c *change, timeout time.Duration) (time.Time, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(timeout):
		t.mu.Lock()
		defer t.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d stores do not show the change after %v", c.left, len(t.stores), timeout)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return c.last, nil
}

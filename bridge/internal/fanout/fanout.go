// Package fanout hands one "something changed" signal to every receiver
// that asked for it. Signals are coalesced: a receiver that has one
// pending gets no second, and reads the current state when it wakes, so
// a slow receiver never blocks the sender.
package fanout

import "sync"

// Fanout is a set of receivers. The zero value is ready to use; it is
// safe for concurrent use.
type Fanout struct {
	mu   sync.Mutex
	subs map[chan struct{}]bool
}

// Subscribe returns a channel that receives after every Notify from now
// on, and a function that stops it.
func (f *Fanout) Subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = map[chan struct{}]bool{}
	}
	f.subs[c] = true
	return c, func() { f.mu.Lock(); delete(f.subs, c); f.mu.Unlock() }
}

// Len is the number of receivers.
func (f *Fanout) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// Notify signals every receiver that has no signal pending.
func (f *Fanout) Notify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

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

// Keyed is a Fanout per key: a Notify reaches only the receivers of the
// keys it names, so that a change to one of many things wakes the few
// receivers that watch it, not all of them. The zero value is ready to
// use; it is safe for concurrent use.
type Keyed struct {
	mu   sync.Mutex
	subs map[string]*Fanout
}

// Subscribe returns a channel that receives after every Notify of key
// from now on, and a function that stops it.
func (k *Keyed) Subscribe(key string) (<-chan struct{}, func()) {
	// Subscribing under k.mu: a stop that empties key's Fanout at the same
	// time must not forget it after this receiver joined it.
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.subs == nil {
		k.subs = map[string]*Fanout{}
	}
	f := k.subs[key]
	if f == nil {
		f = &Fanout{}
		k.subs[key] = f
	}
	c, stop := f.Subscribe()
	return c, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		stop()
		if f.Len() == 0 && k.subs[key] == f {
			delete(k.subs, key)
		}
	}
}

// Len is the number of receivers of key.
func (k *Keyed) Len(key string) int {
	k.mu.Lock()
	f := k.subs[key]
	k.mu.Unlock()
	if f == nil {
		return 0
	}
	return f.Len()
}

// Notify signals every receiver of the keys that has no signal pending.
func (k *Keyed) Notify(keys ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		if f := k.subs[key]; f != nil {
			f.Notify()
		}
	}
}

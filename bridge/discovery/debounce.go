package discovery

import (
	"sort"
	"time"
)

// DefaultDebounce is Discoverer.Debounce's default: udev makes a device's
// node and its links within a few milliseconds, and a hub of devices
// plugged at once within tens, so that 100 ms of quiet ends a burst while
// leaving most of a second for INFO and the kubelet.
const DefaultDebounce = 100 * time.Millisecond

func (d *Discoverer) debounce() time.Duration {
	if d.Debounce > 0 {
		return d.Debounce
	}
	return DefaultDebounce
}

// events gathers the drop-ins that device events concern until they are
// due: debounce after the last event, or five times that after the
// first, so that a device that never stops making events (a flapping
// cable) still gets discovered.
type events struct {
	debounce time.Duration
	pending  map[string]bool
	first    time.Time // when the first pending event was seen; zero for a rescan alone
	since    time.Time // when the pending set was started
	timer    *time.Timer
	// ready says that the pending drop-ins are due and wait only for the
	// job under way to end.
	ready bool
}

// add records that dropIns need INFO, because of an event seen at (zero
// for no event: a rescan).
func (e *events) add(dropIns []string, at time.Time) {
	if len(dropIns) == 0 {
		return
	}
	now := time.Now()
	if e.pending == nil {
		e.pending, e.since = map[string]bool{}, now
	}
	for _, p := range dropIns {
		e.pending[p] = true
	}
	if !at.IsZero() && (e.first.IsZero() || at.Before(e.first)) {
		e.first = at
	}
	wait := min(e.debounce, e.since.Add(5*e.debounce).Sub(now))
	if e.timer == nil {
		e.timer = time.NewTimer(wait)
	} else {
		e.timer.Reset(wait)
	}
}

// due fires when the pending drop-ins are due; never when none are.
func (e *events) due() <-chan time.Time {
	if e.pending == nil || e.timer == nil || e.ready {
		return nil
	}
	return e.timer.C
}

// take returns the pending drop-ins and their first event, and starts
// over.
func (e *events) take() ([]string, time.Time) {
	out := make([]string, 0, len(e.pending))
	for p := range e.pending {
		out = append(out, p)
	}
	sort.Strings(out)
	first := e.first
	e.reset()
	return out, first
}

// reset forgets the pending drop-ins: a full discovery answers them.
func (e *events) reset() {
	e.pending, e.first, e.since, e.ready = nil, time.Time{}, time.Time{}, false
	if e.timer != nil {
		e.timer.Stop()
	}
}

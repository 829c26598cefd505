// Package logrepeat logs a failure that repeats the way an operator can
// read it: the first failure, and a change of what fails, at once; the
// same failure again only every so often, with how many times it
// happened meanwhile; and the recovery, once.
package logrepeat

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is how often a failure that persists is logged again.
const DefaultEvery = 10 * time.Minute

// Failure is one thing that can fail again and again: a reclaim pass,
// the store's list. The zero value logs with DefaultEvery; it is safe for
// concurrent use.
type Failure struct {
	// Every is how often the same failure is logged again (default
	// DefaultEvery).
	Every time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu         sync.Mutex
	last       string    // the failure last logged, "" when none
	at         time.Time // when it was logged
	suppressed int
}

// Failed logs err at ERROR with msg and args when it is new or Every has
// passed since it was last logged; else it counts it.
func (f *Failure) Failed(log *slog.Logger, msg string, err error, args ...any) {
	f.mu.Lock()
	now := f.now()
	text := err.Error()
	if text == f.last && now.Sub(f.at) < f.every() {
		f.suppressed++
		f.mu.Unlock()
		return
	}
	repeats := f.suppressed
	if text != f.last {
		repeats = 0
	}
	f.last, f.at, f.suppressed = text, now, 0
	f.mu.Unlock()
	args = append(args, "error", err)
	if repeats > 0 {
		args = append(args, "repeatedSinceLastLog", repeats)
	}
	log.Error(msg, args...)
}

// Succeeded logs msg at INFO once after a failure; otherwise nothing.
func (f *Failure) Succeeded(log *slog.Logger, msg string, args ...any) {
	f.mu.Lock()
	failing := f.last != ""
	f.last, f.suppressed = "", 0
	f.mu.Unlock()
	if failing {
		log.Info(msg, args...)
	}
}

func (f *Failure) every() time.Duration {
	if f.Every > 0 {
		return f.Every
	}
	return DefaultEvery
}

func (f *Failure) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

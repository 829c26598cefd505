// Package logrepeat logs a failure that repeats the way an operator can
// read it: the first failure, and a change of what fails, at once; the
// same failure again only every so often, with how many times it
// happened meanwhile; and the recovery, once.
package logrepeat

import (
	"context"
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
	f.failed(log, slog.LevelError, msg, err, args)
}

// Warned is Failed at WARN: for a failure that leaves the rest working,
// such as a drop-in skipped.
func (f *Failure) Warned(log *slog.Logger, msg string, err error, args ...any) {
	f.failed(log, slog.LevelWarn, msg, err, args)
}

func (f *Failure) failed(log *slog.Logger, level slog.Level, msg string, err error, args []any) {
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
	log.Log(context.Background(), level, msg, args...)
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

// Failures is a Failure per key, for a loop that meets many things that
// each fail on their own (the drop-ins of a discovery). The zero value
// logs with DefaultEvery; it is safe for concurrent use.
type Failures[K comparable] struct {
	// Every and Now are each Failure's.
	Every time.Duration
	Now   func() time.Time

	mu    sync.Mutex
	byKey map[K]*Failure
}

// Of is key's Failure, made on first use.
func (fs *Failures[K]) Of(key K) *Failure {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.byKey == nil {
		fs.byKey = map[K]*Failure{}
	}
	f, ok := fs.byKey[key]
	if !ok {
		f = &Failure{Every: fs.Every, Now: fs.Now}
		fs.byKey[key] = f
	}
	return f
}

// Retain forgets the Failures of the keys keep refuses: things gone,
// which fail no more, and which, should they come back failing, are new.
func (fs *Failures[K]) Retain(keep func(K) bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for k := range fs.byKey {
		if !keep(k) {
			delete(fs.byKey, k)
		}
	}
}

package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cdiexec/cdi/spec/invoke"
)

// Update is one discovery's result, as Run hands it on.
type Update struct {
	Pools []Pool
	// Event is when the first device event that this discovery answers
	// was seen; zero for a discovery at start, on the period or after a
	// drop-in change.
	Event time.Time
}

// Run discovers at once, then every period, within poll of any change to
// the drop-in folders, and, with a Watch, within Debounce of a device
// event for the drop-ins it concerns, and hands each result to publish.
// It returns when ctx ends, without waiting for a discovery still under
// way: one blocked in the file system (a hung mount, a drop-in that never
// reads to its end) must not hold up the bridge's shutdown. Discoveries
// never overlap: a tick that comes while one runs is skipped, and one
// that runs past Deadline is logged as stuck; device events that come
// meanwhile wait for it to end.
func (d *Discoverer) Run(ctx context.Context, period, poll time.Duration, publish func(Update)) {
	w := &worker{d: d, ctx: ctx, publish: publish, rescan: make(chan []string, 1)}
	if d.Watch != nil {
		w.watch = newDevWatch(d.Watch, d.log())
		w.events, w.errs = d.Watch.Events(), d.Watch.Errors()
		defer d.Watch.Close()
	}
	w.start(func() { w.seen = Fingerprint(d.ConfDir); w.discover(nil, time.Time{}, false) })
	full := time.NewTicker(period)
	defer full.Stop()
	check := time.NewTicker(poll)
	defer check.Stop()
	ev := &events{debounce: d.debounce()}
	for {
		select {
		case <-ctx.Done():
			w.stop()
			return
		case <-full.C:
			if w.start(func() { w.discover(nil, time.Time{}, true) }) {
				ev.reset()
			}
		case <-check.C:
			w.start(w.checkDropIns)
		case path, ok := <-w.events:
			if !ok {
				w.watchEnded()
				continue
			}
			ev.add(w.watch.concerned(path), time.Now())
		case err, ok := <-w.errs:
			if !ok {
				w.watchEnded()
				continue
			}
			d.log().Warn("device watch: discovering every watched drop-in", "error", err)
			ev.add(w.watch.all(), time.Now())
		case dropIns := <-w.rescan:
			ev.add(dropIns, time.Time{})
		case <-ev.due():
			ev.ready = true
		case <-w.idle(ev.ready):
			dropIns, at := ev.take()
			w.start(func() { w.discover(dropIns, at, true) })
		}
	}
}

// worker runs Run's discoveries one at a time, each in a goroutine of its
// own that Run does not wait for.
type worker struct {
	d       *Discoverer
	ctx     context.Context
	publish func(Update)
	// watch is nil without a Watcher; events and errs are its channels,
	// nil without one or once it closed them.
	watch  *devWatch
	events <-chan string
	errs   <-chan error
	// rescan carries, from a job to Run's loop, the drop-ins that need
	// one more INFO since a directory of theirs was watched only now.
	rescan chan []string
	// seen is the drop-ins' last Fingerprint; only jobs touch it, and
	// they run one after the other.
	seen string

	running chan struct{} // closed when the job under way ends; nil before the first
	since   time.Time     // when it started
	warned  bool          // its stuck warning was logged

	// mu is held by a publish and by stop: once stop returns, no result
	// is published, so that Run's caller may tear down what publish
	// feeds. A discovery itself is never waited for.
	mu      sync.Mutex
	stopped bool
}

func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
}

// start runs job unless the previous one is still under way, and says
// whether it did.
func (w *worker) start(job func()) bool {
	if w.running != nil {
		select {
		case <-w.running:
		default:
			if stuck := time.Since(w.since); stuck > w.d.deadline() && !w.warned {
				w.warned = true
				w.d.log().Error("discovery stuck; no other starts until it returns", "for", stuck.Round(time.Second).String())
			}
			return false
		}
	}
	done := make(chan struct{})
	w.running, w.since, w.warned = done, time.Now(), false
	w.d.setRunning(w.since)
	go func() {
		defer close(done)
		defer w.d.setRunning(time.Time{})
		job()
	}()
	return true
}

// idle fires once no job is under way, if ready; never while not. Run
// starts a job before it first asks, so running is set.
func (w *worker) idle(ready bool) <-chan struct{} {
	if !ready {
		return nil
	}
	return w.running
}

// watchEnded stops listening to a Watcher that closed its channels
// (which only Close should do): a closed channel would wake Run's loop
// for ever. Devices then come and go at the period.
func (w *worker) watchEnded() {
	if w.events != nil || w.errs != nil {
		w.d.log().Error("the device watch ended; devices come and go at the discovery period")
	}
	w.events, w.errs = nil, nil
}

// discover runs INFO for dropIns, or for every drop-in when nil, brings
// the device watches up to date (asking for a rescan of the drop-ins
// that got a new one, unless this is the first discovery) and publishes.
// event is when the first device event it answers was seen.
func (w *worker) discover(dropIns []string, event time.Time, rescan bool) {
	var pools []Pool
	var err error
	if dropIns == nil {
		pools, err = w.d.Discover(w.ctx)
	} else {
		pools, err = w.d.DiscoverDropIns(w.ctx, dropIns)
	}
	if err != nil {
		w.d.log().Error("discovery failed", "error", err)
		return
	}
	if w.watch != nil {
		if again := w.watch.sync(w.d.watchSets()); rescan && len(again) > 0 {
			select {
			case w.rescan <- again:
			case <-w.ctx.Done():
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.publish(Update{Pools: pools, Event: event})
	}
}

// checkDropIns discovers again if the drop-in folders changed.
func (w *worker) checkDropIns() {
	if now := Fingerprint(w.d.ConfDir); now != w.seen {
		w.d.log().Info("drop-ins changed; discovering again", "dir", w.d.ConfDir)
		w.seen = now
		w.discover(nil, time.Time{}, true)
	}
}

// Fingerprint summarizes the drop-in folders of confDir, one directory or
// several separated by ':' (names, sizes and modification times of
// everything in <dir>/*.d), so that a change is noticed without a
// file-watching dependency. Editors that replace a file change its time or
// size, and so does a ConfigMap volume's update; a folder that cannot be
// read is part of the summary too.
func Fingerprint(confDir string) string {
	var b strings.Builder
	var dirs []string
	for _, c := range invoke.SplitPath(confDir) {
		found, err := filepath.Glob(filepath.Join(c, "*.d"))
		if err != nil {
			return err.Error()
		}
		dirs = append(dirs, found...)
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", dir, err)
			continue
		}
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			fmt.Fprintf(&b, "%s/%s %d %d\n", dir, e.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

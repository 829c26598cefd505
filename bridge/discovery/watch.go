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

// Run discovers at once, then every period and within poll of any change
// to the drop-in folders, and hands each result to publish. It returns
// when ctx ends, without waiting for a discovery still under way: one
// blocked in the file system (a hung mount, a drop-in that never reads to
// its end) must not hold up the bridge's shutdown. Discoveries never
// overlap: a tick that comes while one runs is skipped, and one that runs
// past Deadline is logged as stuck.
func (d *Discoverer) Run(ctx context.Context, period, poll time.Duration, publish func([]Pool)) {
	w := &worker{d: d, ctx: ctx, publish: publish}
	w.start(func() { w.seen = Fingerprint(d.ConfDir); w.discover() })
	full := time.NewTicker(period)
	defer full.Stop()
	check := time.NewTicker(poll)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			w.stop()
			return
		case <-full.C:
			w.start(w.discover)
		case <-check.C:
			w.start(w.checkDropIns)
		}
	}
}

// worker runs Run's discoveries one at a time, each in a goroutine of its
// own that Run does not wait for.
type worker struct {
	d       *Discoverer
	ctx     context.Context
	publish func([]Pool)
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

// start runs job unless the previous one is still under way.
func (w *worker) start(job func()) {
	if w.running != nil {
		select {
		case <-w.running:
		default:
			if stuck := time.Since(w.since); stuck > w.d.deadline() && !w.warned {
				w.warned = true
				w.d.log().Error("discovery stuck; no other starts until it returns", "for", stuck.Round(time.Second).String())
			}
			return
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
}

func (w *worker) discover() {
	pools, err := w.d.Discover(w.ctx)
	if err != nil {
		w.d.log().Error("discovery failed", "error", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.publish(pools)
	}
}

// checkDropIns discovers again if the drop-in folders changed.
func (w *worker) checkDropIns() {
	if now := Fingerprint(w.d.ConfDir); now != w.seen {
		w.d.log().Info("drop-ins changed; discovering again", "dir", w.d.ConfDir)
		w.seen = now
		w.discover()
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

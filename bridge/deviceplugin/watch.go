package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// watcher is Run's state between passes: the kubelet it registers with.
type watcher struct {
	ps   *Plugins
	conn *kubeletConn
	// kubelet is kubelet.sock as last seen; nil while it is not there.
	kubelet os.FileInfo
	// waiting says that "waiting for the kubelet" was logged.
	waiting bool
}

// pass looks at the directory once and hands every plugin that needs a
// registration to the workers: those never registered or backed off long
// enough, and those the kubelet forgot (kubelet.sock re-created, the
// plugin's socket gone, its stream closed for longer than StreamGrace).
func (w *watcher) pass(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	kubelet, err := os.Stat(w.conn.path)
	if err != nil {
		w.kubeletAbsent(err)
		return
	}
	restarted := w.kubelet != nil && !os.SameFile(w.kubelet, kubelet)
	if w.kubelet == nil || restarted {
		w.conn.reset()
	}
	if restarted {
		w.ps.log().Info("kubelet.sock was re-created: registering every device plugin again")
	}
	if w.waiting {
		w.ps.log().Info("kubelet.sock is there: registering device plugins")
		w.waiting = false
	}
	w.kubelet = kubelet
	sockets, err := socketNames(w.ps.Dir)
	if err != nil {
		w.ps.log().Error("reading the device-plugin directory", "dir", w.ps.Dir, "error", err)
		return
	}
	w.register(ctx, w.due(restarted, sockets))
}

// kubeletAbsent drops every registration: the kubelet that held them is
// gone, and a new one will know none of them. Nothing is attempted until
// kubelet.sock is back, and that is logged once, not per plugin.
func (w *watcher) kubeletAbsent(err error) {
	if !w.waiting {
		w.ps.log().Warn("waiting for the kubelet: kubelet.sock is not there", "error", err)
		w.waiting = true
	}
	w.kubelet = nil
	ps := w.ps
	var lost []string
	ps.mu.Lock()
	for _, p := range ps.plugins {
		if p.busy || p.reg == nil {
			continue
		}
		reg := p.reg
		p.reg = nil
		lost = append(lost, p.Resource)
		ps.inflight.Add(1)
		go func() { defer ps.inflight.Done(); reg.stop(false) }()
	}
	ps.mu.Unlock()
	// Told outside the lock: OnRegister may take locks of its own that
	// are held around Add.
	for _, res := range lost {
		ps.report(res, fmt.Errorf("%w: %v", ErrKubeletGone, err))
	}
}

// due marks busy, and returns, the plugins that need a registration now.
func (w *watcher) due(restarted bool, sockets map[string]bool) []*plugin {
	ps := w.ps
	now := time.Now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []*plugin
	for _, p := range ps.plugins {
		if p.busy {
			continue
		}
		if p.reg != nil && !restarted && socketThere(sockets, p.reg.sock) && !p.reg.srv.orphaned(ps.grace()) {
			continue
		}
		if p.reg == nil && now.Before(p.next) {
			continue
		}
		p.busy = true
		out = append(out, p)
	}
	// Registered in name order: the order a log or a test reads them in.
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

// register runs the plugins' registrations on at most Parallel workers;
// it does not wait for them.
func (w *watcher) register(ctx context.Context, todo []*plugin) {
	if len(todo) == 0 {
		return
	}
	b := &batch{todo: todo, size: len(todo), start: time.Now()}
	b.workers = min(len(todo), w.ps.parallel())
	w.ps.inflight.Add(b.workers)
	for range b.workers {
		go func() {
			defer w.ps.inflight.Done()
			for p := b.next(); p != nil; p = b.next() {
				b.done(w.attempt(ctx, p))
			}
			if b.finish() {
				w.ps.log().Info("device plugin registrations", "attempted", b.size, "registered", b.ok,
					"took", time.Since(b.start).Round(time.Millisecond).String())
			}
		}()
	}
}

// batch is one pass's registrations, shared by its workers: one log line
// tells how they went, not one per plugin.
type batch struct {
	mu       sync.Mutex
	todo     []*plugin
	size, ok int
	workers  int
	start    time.Time
}

func (b *batch) next() *plugin {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.todo) == 0 {
		return nil
	}
	p := b.todo[0]
	b.todo = b.todo[1:]
	return p
}

func (b *batch) done(ok bool) {
	if ok {
		b.mu.Lock()
		b.ok++
		b.mu.Unlock()
	}
}

// finish says whether the calling worker was the batch's last.
func (b *batch) finish() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.workers--
	return b.workers == 0
}

// attempt replaces p's registration by a new one, records the outcome,
// and says whether p is registered.
func (w *watcher) attempt(ctx context.Context, p *plugin) bool {
	ps := w.ps
	ps.mu.Lock()
	old := p.reg
	p.reg = nil
	ps.mu.Unlock()
	if old != nil {
		old.stop(false)
	}
	reg, err := w.conn.registration(ctx, p.Spec, ps.Dir)
	ps.mu.Lock()
	keep, removed := err == nil && !p.removed && ctx.Err() == nil, p.removed
	if keep {
		p.reg, p.failures, p.next = reg, 0, time.Time{}
	} else if err != nil {
		p.failures++
		p.next = time.Now().Add(backoff(p.failures))
	}
	failures, retry := p.failures, time.Until(p.next)
	p.busy = false
	ps.mu.Unlock()
	switch {
	case err == nil && !keep:
		// Removed, or the Plugins stopped, while it registered.
		reg.stop(removed)
		return false
	case err == nil:
		ps.log().Debug("registered with the kubelet", "resource", p.Resource, "socket", reg.sock)
	case ctx.Err() != nil:
		return false
	case failures == 1:
		ps.log().Error("device plugin registration failed; retrying with backoff (further failures are logged at debug level)",
			"resource", p.Resource, "error", err, "retryIn", retry.Round(time.Millisecond).String())
	default:
		ps.log().Debug("device plugin registration failed", "resource", p.Resource, "error", err, "failures", failures)
	}
	if ctx.Err() == nil {
		ps.report(p.Resource, err)
	}
	return err == nil
}

// socketThere says whether sock is in the device-plugin directory. The
// listing is the cheap answer for thousands of sockets, but pass reads
// it before due takes the lock: a registration that finished in between
// has a socket the listing lacks, and registering that plugin again
// would make its resource blink on the node. So a socket the listing
// lacks is looked up by name before it counts as gone.
func socketThere(listed map[string]bool, sock string) bool {
	if listed[filepath.Base(sock)] {
		return true
	}
	_, err := os.Lstat(sock)
	return err == nil
}

// socketNames is the set of file names in dir.
func socketNames(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names, nil
}

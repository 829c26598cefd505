package deviceplugin

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"
)

// Spec is one device plugin: the resource it serves and its logic.
type Spec struct {
	// Resource is the extended resource, e.g. cdi.example.com/gpu-drm.
	Resource string
	Handler  Handler
	// Preferred advertises GetPreferredAllocation.
	Preferred bool
	// Sent, if set, is called after every list a ListAndWatch stream
	// sent, the empty one at stop included: the moment the kubelet has
	// it.
	Sent func()
}

// Plugins serves device plugins to the kubelet of one device-plugin
// directory. The kubelet API gives each plugin a socket and a gRPC server
// of its own; everything else is shared, so that a node with thousands of
// devices costs a few goroutines per device: one connection to the
// kubelet's Registration service, one poll of the directory and of the
// streams, and a bounded number of registrations in flight.
//
// Set the fields, call Run, and Add and Remove plugins while it runs.
type Plugins struct {
	// Dir is the kubelet's device-plugin directory, holding kubelet.sock.
	Dir    string
	Logger *slog.Logger
	// PollInterval is how often kubelet.sock, the sockets and the streams
	// are checked (default 1 s).
	PollInterval time.Duration
	// StreamGrace is how long a plugin waits, after the kubelet closed its
	// last ListAndWatch stream, for a new one before registering again
	// (default 5 s).
	StreamGrace time.Duration
	// Parallel bounds the registrations in flight (default 16).
	Parallel int
	// OnRegister, if set, is told of every registration attempt, and of
	// every registration lost because kubelet.sock went away.
	OnRegister func(resource string, err error)

	mu      sync.Mutex
	plugins map[string]*plugin
	kick    chan struct{} // wakes Run: a plugin was added
	// inflight counts the registrations and stops under way.
	inflight sync.WaitGroup
}

// plugin is one Spec and its registration.
type plugin struct {
	Spec
	reg *registration // nil while not registered
	// busy is set while a worker registers or stops it.
	busy    bool
	removed bool
	// failures counts the failed attempts since the last success; next is
	// the earliest time of the next attempt.
	failures int
	next     time.Time
}

// ErrKubeletGone is what OnRegister is told when kubelet.sock vanished
// under a registered plugin.
var ErrKubeletGone = errors.New("kubelet.sock is gone")

// Add starts serving spec, replacing nothing: a resource already served
// is left as it is.
func (ps *Plugins) Add(spec Spec) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.init()
	if _, ok := ps.plugins[spec.Resource]; ok {
		return
	}
	ps.plugins[spec.Resource] = &plugin{Spec: spec}
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// Remove stops serving resource: its streams get an empty list, and its
// socket goes. (When the Plugins stop, their streams end without one: see
// registration.stop.)
func (ps *Plugins) Remove(resource string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, ok := ps.plugins[resource]
	if !ok {
		return
	}
	delete(ps.plugins, resource)
	p.removed = true
	if !p.busy && p.reg != nil {
		reg := p.reg
		p.reg = nil
		ps.inflight.Add(1)
		go func() { defer ps.inflight.Done(); reg.stop(true) }()
	}
}

// Run serves until ctx ends, registering each plugin, and again whenever
// the kubelet forgets it, backing off after failures; then it stops every
// plugin and returns.
func (ps *Plugins) Run(ctx context.Context) error {
	ps.mu.Lock()
	ps.init()
	ps.mu.Unlock()
	w := &watcher{ps: ps, conn: &kubeletConn{path: filepath.Join(ps.Dir, "kubelet.sock")}}
	defer w.conn.close()
	tick := time.NewTicker(ps.poll())
	defer tick.Stop()
	for {
		w.pass(ctx)
		select {
		case <-ctx.Done():
			ps.stopAll()
			ps.inflight.Wait()
			return nil
		case <-tick.C:
		case <-ps.kick:
		}
	}
}

func (ps *Plugins) init() {
	if ps.plugins == nil {
		ps.plugins = map[string]*plugin{}
		ps.kick = make(chan struct{}, 1)
	}
}

// stopAll stops every registration that no worker holds; a worker that
// holds one stops it itself, seeing ctx ended.
func (ps *Plugins) stopAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.plugins {
		if p.busy || p.reg == nil {
			continue
		}
		reg := p.reg
		p.reg = nil
		ps.inflight.Add(1)
		go func() { defer ps.inflight.Done(); reg.stop(false) }()
	}
}

func (ps *Plugins) poll() time.Duration {
	if ps.PollInterval > 0 {
		return ps.PollInterval
	}
	return time.Second
}

func (ps *Plugins) grace() time.Duration {
	if ps.StreamGrace > 0 {
		return ps.StreamGrace
	}
	return 5 * time.Second
}

func (ps *Plugins) parallel() int {
	if ps.Parallel > 0 {
		return ps.Parallel
	}
	return 16
}

func (ps *Plugins) report(resource string, err error) {
	if ps.OnRegister != nil {
		ps.OnRegister(resource, err)
	}
}

func (ps *Plugins) log() *slog.Logger {
	if ps.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return ps.Logger
}

// backoff is the wait after the n-th failed attempt in a row: 100 ms,
// doubling, at most 10 s.
func backoff(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

package invoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrNotRun is wrapped by ExecPluginAfter's error when the plugin was
// stopped before it read its input, because ready said not to go on.
var ErrNotRun = errors.New("plugin stopped before its input")

// ExecAfter is an Exec that can start a plugin before the caller has
// decided to run it: the process starts at once and blocks reading stdin,
// which it gets only once ready yields nil. A plugin reads its
// configuration from stdin before it does anything else, so one stopped
// there has changed nothing. The bridge uses this to let a plugin start
// while it claims the slot the plugin is to set up.
type ExecAfter interface {
	// ExecPluginAfter is ExecPlugin with stdin held back until ready
	// yields. An error from ready kills the plugin, unread, and the call
	// returns an error wrapping ErrNotRun and that error.
	ExecPluginAfter(ctx context.Context, path string, stdin []byte, env []string, ready <-chan error) (*Output, error)
}

var _ ExecAfter = ProcessExec{}

// ExecPluginAfter implements ExecAfter.
func (e ProcessExec) ExecPluginAfter(ctx context.Context, path string, stdin []byte, env []string, ready <-chan error) (*Output, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &gatedStdin{ctx: ctx, ready: ready, stop: cancel}
	out, err := e.execReader(ctx, path, func() io.Reader { g.data = bytes.NewReader(stdin); return g }, env)
	if g.unread() {
		// It exited without asking for its input (it failed early, or
		// ignores the protocol): the caller still hears what ready says.
		_ = g.wait()
	}
	if held := g.held(); held != nil {
		return out, fmt.Errorf("%w: %s: %w", ErrNotRun, path, held)
	}
	return out, err
}

// gatedStdin is a plugin's stdin that yields nothing until ready does.
type gatedStdin struct {
	ctx   context.Context
	ready <-chan error
	stop  context.CancelFunc
	data  io.Reader

	mu     sync.Mutex
	opened bool
	err    error // what ready said, when not to go on
}

func (g *gatedStdin) Read(p []byte) (int, error) {
	if err := g.wait(); err != nil {
		return 0, err
	}
	return g.data.Read(p)
}

// wait blocks the first Read until ready yields or ctx ends; an error
// from ready kills the plugin by ending its context.
func (g *gatedStdin) wait() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened || g.err != nil {
		return g.err
	}
	select {
	case err := <-g.ready:
		if err != nil {
			g.err = err
			g.stop()
			return err
		}
		g.opened = true
		return nil
	case <-g.ctx.Done():
		return g.ctx.Err()
	}
}

// unread reports whether the plugin never got past waiting for ready.
func (g *gatedStdin) unread() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.opened && g.err == nil
}

func (g *gatedStdin) held() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Package fakeexec provides an invoke.Exec that runs nothing: it answers
// each CDI_COMMAND from a table and records every call, for unit tests of
// code that calls plugins.
package fakeexec

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

var _ invoke.Exec = (*Exec)(nil)

// Reply is what the fake plugin does for one command.
type Reply struct {
	Stdout     string
	Stderr     string
	ExitStatus int
	// Err, when set, is returned instead of an Output, as ProcessExec does
	// for a plugin that could not run (wrap an invoke sentinel in it).
	Err error
}

// Call is one recorded run.
type Call struct {
	Path  string
	Stdin []byte
	Env   []string
}

// Getenv returns the value of name in the call's environment.
func (c Call) Getenv(name string) (string, bool) {
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// Command returns the call's CDI_COMMAND, upper-cased.
func (c Call) Command() string {
	v, _ := c.Getenv(spec.EnvCommand)
	return strings.ToUpper(v)
}

// Exec answers from Replies, keyed by upper-case CDI_COMMAND. A command
// without an entry gets the error document skel prints for an unsupported
// command, with exit status 1. Set Replies before the first call.
type Exec struct {
	Replies map[string]Reply

	mu    sync.Mutex
	calls []Call
}

// ExecPlugin implements invoke.Exec.
func (e *Exec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*invoke.Output, error) {
	c := Call{Path: path, Stdin: append([]byte(nil), stdin...), Env: append([]string(nil), env...)}
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", invoke.ErrTimeout, path, err)
	}
	r, ok := e.Replies[c.Command()]
	if !ok {
		r = Reply{ExitStatus: 1, Stdout: fmt.Sprintf(`{"code":3,"msg":"Command unsupported","details":"Unsupported command: %s"}`, c.Command())}
	}
	if r.Err != nil {
		return nil, r.Err
	}
	return &invoke.Output{Stdout: []byte(r.Stdout), Stderr: []byte(r.Stderr), ExitStatus: r.ExitStatus}, nil
}

// Calls returns the calls made so far, oldest first.
func (e *Exec) Calls() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Call(nil), e.calls...)
}

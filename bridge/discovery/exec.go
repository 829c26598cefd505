package discovery

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// exec is the Exec the pools' plugins run with: d.Exec, timed when
// OnExec is set. Timing each exec rather than each call counts the VERSION
// runs a call may start with on their own.
func (d *Discoverer) exec() invoke.Exec {
	ex := d.Exec
	if ex == nil {
		ex = invoke.ProcessExec{}
	}
	if d.OnExec == nil {
		return ex
	}
	return timedExec{inner: ex, observe: d.OnExec}
}

// timedExec tells observe how long every plugin run took, and how it
// ended.
type timedExec struct {
	inner   invoke.Exec
	observe func(plugin, command, result string, took time.Duration)
}

// Results OnExec reports.
const (
	// ExecOK is a run that exited 0.
	ExecOK = "ok"
	// ExecError is a run that exited non-zero: the plugin answered with
	// an error document (or crashed).
	ExecError = "error"
	// ExecFailed is a run that did not finish: not started, or killed at
	// its timeout.
	ExecFailed = "failed"
)

func (e timedExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*invoke.Output, error) {
	start := time.Now()
	out, err := e.inner.ExecPlugin(ctx, path, stdin, env)
	result := ExecOK
	switch {
	case err != nil:
		result = ExecFailed
	case out.ExitStatus != 0:
		result = ExecError
	}
	e.observe(filepath.Base(path), command(env), result, time.Since(start))
	return out, err
}

// command is the CDI_COMMAND of a plugin run's environment, upper-cased
// as the plugins match it; "" when there is none.
func command(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, spec.EnvCommand+"="); ok {
			return strings.ToUpper(v)
		}
	}
	return ""
}

package dradevices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// calls records what Observed tells of each call.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) onClaim(op, pool, reason string, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if took <= 0 {
		reason += " (no time)"
	}
	c.got = append(c.got, op+" "+pool+" "+reason)
}

func (c *calls) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := strings.Join(c.got, "; ")
	c.got = nil
	return out
}

// Every Prepare and Unprepare is told, by the bridge pool of its
// devices and, when it failed, why: against the real plugin.
func TestObserved(t *testing.T) {
	r := newRig(t, 1, withGPUs)
	var c calls
	devices := Observed(r.p, c.onClaim)
	ctx := context.Background()
	two := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"cdi.local", "n/gpu-drm", DeviceName("0000:03:00.0")},
		result{"cdi.local", "n/tty-generic", r.devices[1]})
	steps := []struct {
		name string
		call func() error
		want string
	}{
		{"a claim of two pools", func() error { _, err := devices.Prepare(ctx, two); return err }, "prepare tty-generic ; prepare gpu-drm "},
		{"its unprepare", func() error { return devices.Unprepare(ctx, "u1") }, "unprepare tty-generic ; unprepare gpu-drm "},
		{"an unprepare of nothing recorded", func() error { return devices.Unprepare(ctx, "u1") }, "unprepare unknown "},
		{"another node's pool", func() error {
			_, err := devices.Prepare(ctx, claim("u2", result{"cdi.local", "m/tty-generic", r.devices[0]}))
			return err
		}, "prepare unknown not-allocatable"},
		{"a device taken twice", func() error {
			_, err := devices.Prepare(ctx, claim("u3", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"cdi.local", "n/tty-generic", r.devices[0]}))
			return err
		}, "prepare tty-generic plugin-code-10"},
	}
	for _, st := range steps {
		err := st.call()
		if got := c.take(); got != st.want {
			t.Errorf("%s (%v): told %q, want %q", st.name, err, got, st.want)
		}
	}
}

func TestReason(t *testing.T) {
	pathErr := &os.PathError{Op: "open", Path: "/var/lib/cdi/bridge/dra-claims.json", Err: os.ErrPermission}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", ErrNotReady), "not-discovered"},
		{fmt.Errorf("x: %w", ErrNotAllocatable), "not-allocatable"},
		{fmt.Errorf("ADD: %w", invoke.ErrTimeout), "plugin-timeout"},
		{fmt.Errorf("ADD: %w", invoke.ErrNotFound), "plugin-not-run"},
		{fmt.Errorf("ADD: %w", invoke.ErrBadOutput), "plugin-bad-output"},
		{fmt.Errorf("ADD: %w", &spec.Error{Code: spec.CodeInsufficientResources}), "plugin-code-10"},
		{fmt.Errorf("ADD: %w", &spec.Error{Code: 123}), "plugin-code-other"},
		{errors.Join(fmt.Errorf("ADD: %w", &spec.Error{Code: spec.CodeUnknownDevice}), fmt.Errorf("undo: %w", pathErr)), "plugin-code-12"},
		{fmt.Errorf("DRA checkpoint: %w", pathErr), "file-system"},
		{context.Canceled, "canceled"},
		{errors.New("what"), "other"},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

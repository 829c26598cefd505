package invoke_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// countingExec runs plugins as processes, as ProcessExec does, and counts
// the runs of each command.
type countingExec struct {
	mu   sync.Mutex
	runs map[string]int
}

func (e *countingExec) count(env []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runs == nil {
		e.runs = map[string]int{}
	}
	for _, kv := range env {
		if cmd, ok := strings.CutPrefix(kv, spec.EnvCommand+"="); ok {
			e.runs[cmd]++
		}
	}
}

func (e *countingExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*invoke.Output, error) {
	e.count(env)
	return invoke.ProcessExec{}.ExecPlugin(ctx, path, stdin, env)
}

func (e *countingExec) ExecPluginAfter(ctx context.Context, path string, stdin []byte, env []string, ready <-chan error) (*invoke.Output, error) {
	e.count(env)
	return invoke.ProcessExec{}.ExecPluginAfter(ctx, path, stdin, env, ready)
}

// ran returns how often command has run.
func (e *countingExec) ran(command string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[command]
}

// cachedPlugin is a fresh Plugin of the binary at path in mode, which
// keeps its VERSION reply in cache and runs by ex.
func cachedPlugin(path, mode string, cache *invoke.VersionCache, ex *countingExec) *invoke.Plugin {
	return &invoke.Plugin{Path: path, Config: testConf(mode), Timeout: 10 * time.Second, Exec: ex, Versions: cache}
}

// TestVersionCacheKeepsAReplyPerBinary: the Plugins of one binary that
// share a VersionCache run VERSION once between them, and again when the
// file at the binary's path is another: touched, or replaced by a rename.
func TestVersionCacheKeepsAReplyPerBinary(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := exectest.Install(t, filepath.Join(pluginDir, "testplugin"), dir)
	cache, ex := &invoke.VersionCache{}, &countingExec{}
	tests := []struct {
		name     string
		change   func(t *testing.T)
		versions int // VERSION runs so far
	}{
		{"first call", func(*testing.T) {}, 1},
		{"same binary", func(*testing.T) {}, 1},
		{"touched", func(t *testing.T) {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"same binary again", func(*testing.T) {}, 2},
		{"replaced", func(t *testing.T) { exectest.Install(t, filepath.Join(pluginDir, "testplugin"), dir) }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.change(t)
			p := cachedPlugin(path, "", cache, ex)
			info, err := p.Info(ctx)
			if err != nil || info.CDIVersion != spec.Current {
				t.Fatalf("Info = %+v, %v; want a %s result", info, err, spec.Current)
			}
			if _, err := p.Add(ctx, invoke.AddRequest{Request: mustRequest(t, "tty:1"), RequestID: "r1"}); err != nil {
				t.Fatal(err)
			}
			if got := ex.ran(spec.CmdVersion); got != tt.versions {
				t.Errorf("%d VERSION runs, want %d", got, tt.versions)
			}
		})
	}
}

// TestVersionAskedAgainAfterCode1: a plugin that refuses the version kept
// for its binary with code 1, as one does when the file stayed but what
// runs changed (here the drop-in makes the same binary a plugin of 0.1.0
// alone), is asked VERSION again, and each command succeeds in the
// version that gives, in one call.
func TestVersionAskedAgainAfterCode1(t *testing.T) {
	ctx := context.Background()
	ready := func() <-chan error { c := make(chan error, 1); c <- nil; return c }
	tests := []struct {
		name string
		run  func(p *invoke.Plugin) (string, error)
	}{
		{"info", func(p *invoke.Plugin) (string, error) { r, err := p.Info(ctx); return versionOf(r, err) }},
		{"add", func(p *invoke.Plugin) (string, error) {
			r, err := p.Add(ctx, invoke.AddRequest{Request: mustRequest(t, "tty:1"), RequestID: "r1", Devices: []string{"tty1"}})
			return versionOf(r, err)
		}},
		{"add after", func(p *invoke.Plugin) (string, error) {
			r, err := p.AddAfter(ctx, invoke.AddRequest{Request: mustRequest(t, "tty:1"), RequestID: "r1"}, ready())
			return versionOf(r, err)
		}},
		{"del", func(p *invoke.Plugin) (string, error) { return spec.Version010, p.Del(ctx, "r1") }},
		{"list", func(p *invoke.Plugin) (string, error) { r, err := p.List(ctx); return versionOf(r, err) }},
		{"gc", func(p *invoke.Plugin) (string, error) { r, err := p.GC(ctx, []string{"r1"}); return versionOf(r, err) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(pluginDir, "testplugin")
			cache, ex := &invoke.VersionCache{}, &countingExec{}
			if v, err := cachedPlugin(path, "", cache, ex).Negotiate(ctx); err != nil || v != spec.Current {
				t.Fatalf("Negotiate = %q, %v", v, err)
			}
			older := cachedPlugin(path, "v010", cache, ex)
			if v, err := tt.run(older); err != nil || v != spec.Version010 {
				t.Fatalf("got a %q result, %v; want one of %s", v, err, spec.Version010)
			}
			if got := ex.ran(spec.CmdVersion); got != 2 {
				t.Errorf("%d VERSION runs, want 2: one before, one after the code 1", got)
			}
			if v, err := cachedPlugin(path, "v010", cache, ex).Negotiate(ctx); err != nil || v != spec.Version010 || ex.ran(spec.CmdVersion) != 2 {
				t.Errorf("after: Negotiate = %q, %v, with %d VERSION runs; want %s kept", v, err, ex.ran(spec.CmdVersion), spec.Version010)
			}
		})
	}
}

// versionOf returns the cdiVersion of a result.
func versionOf[R interface {
	*spec.InfoResult | *spec.AddResult | *spec.ListResult | *spec.GCResult
}](r R, err error) (string, error) {
	if err != nil {
		return "", err
	}
	switch r := any(r).(type) {
	case *spec.InfoResult:
		return r.CDIVersion, nil
	case *spec.AddResult:
		return r.CDIVersion, nil
	case *spec.ListResult:
		return r.CDIVersion, nil
	case *spec.GCResult:
		return r.CDIVersion, nil
	}
	return "", nil
}

// A plugin that refuses a version set by hand (CDIVersion) is not asked
// again: the caller chose it.
func TestPinnedVersionNotAskedAgain(t *testing.T) {
	ex := &countingExec{}
	p := cachedPlugin(filepath.Join(pluginDir, "testplugin"), "v010", &invoke.VersionCache{}, ex)
	p.CDIVersion = spec.Version020
	if _, err := p.Info(context.Background()); spec.CodeOf(err) != spec.CodeIncompatibleVersion || ex.ran(spec.CmdVersion) != 0 {
		t.Fatalf("Info = %v after %d VERSION runs; want the plugin's code 1, and no VERSION", err, ex.ran(spec.CmdVersion))
	}
}

// MinVersion refuses a plugin whose newest version in common is older,
// naming the versions it speaks, before any command runs.
func TestMinVersion(t *testing.T) {
	ex := &countingExec{}
	for _, mode := range []string{"old", "v010"} {
		p := cachedPlugin(filepath.Join(pluginDir, "testplugin"), mode, nil, ex)
		p.MinVersion = spec.Version010
		info, err := p.Info(context.Background())
		switch mode {
		case "old":
			if !errors.Is(err, invoke.ErrIncompatible) || !strings.Contains(err.Error(), "supports 0.0.1, 0.0.2; this caller needs 0.1.0 or newer") {
				t.Errorf("a plugin of 0.0.2: %v, want ErrIncompatible naming the versions", err)
			}
		case "v010":
			if err != nil || info.CDIVersion != spec.Version010 {
				t.Errorf("a plugin of 0.1.0: %+v, %v", info, err)
			}
		}
	}
	if ex.ran(spec.CmdInfo) != 1 {
		t.Errorf("%d INFO runs, want 1: none for the plugin of 0.0.2", ex.ran(spec.CmdInfo))
	}
}

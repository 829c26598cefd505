package invoke_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

func TestProcessSuccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newPlugin("")
	var logs bytes.Buffer
	p.Stderr = &logs

	v, err := p.Version(ctx)
	if err != nil || !reflect.DeepEqual(v.SupportedVersions, spec.SupportedVersions()) {
		t.Fatalf("Version = %+v, %v", v, err)
	}
	info, err := p.Info(ctx)
	if err != nil || info.CDIVersion != spec.Current || info.Counts["tty"] != 2 || len(info.Devices) != 2 {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	if !strings.Contains(logs.String(), "testplugin: INFO") {
		t.Errorf("plugin stderr not copied to Plugin.Stderr: %q", logs.String())
	}
	add, err := p.Add(ctx, invoke.AddRequest{Request: mustRequest(t, "tty:2"), RequestID: "r1", NUMANodes: []int{0}, Devices: []string{"tty0", "tty1"}})
	if err != nil || len(add.Devices) != 2 || len(add.DeviceNodes) != 2 || add.Env["PINNED"] != "tty0,tty1" {
		t.Fatalf("Add = %+v, %v", add, err)
	}
	if err := p.Del(ctx, "r1"); err != nil {
		t.Fatalf("Del = %v", err)
	}
	list, err := p.List(ctx)
	if err != nil || len(list.Allocations) != 1 || list.Allocations[0].RequestID != "r1" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	for _, tc := range []struct {
		valid, want []string
	}{{nil, []string{"r1", "r2"}}, {[]string{"r1"}, []string{"r2"}}, {[]string{"r1", "r2"}, []string{}}} {
		gc, err := p.GC(ctx, tc.valid)
		if err != nil || !reflect.DeepEqual(gc.Released, tc.want) {
			t.Fatalf("GC(%v) = %+v, %v; want released %v", tc.valid, gc, err, tc.want)
		}
	}
}

func mustRequest(t *testing.T, s string) spec.Request {
	t.Helper()
	r, err := spec.ParseRequest(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestProcessErrorDocuments: whatever the exit status, a plugin's error
// document comes back as a *spec.Error with its code.
func TestProcessErrorDocuments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		mode string
		run  func(*invoke.Plugin) error
		code spec.Code
	}{
		{"info plugin code", "fail", func(p *invoke.Plugin) error { _, err := p.Info(ctx); return err }, spec.CodePluginMin + 1},
		{"add insufficient", "fail", func(p *invoke.Plugin) error {
			_, err := p.Add(ctx, invoke.AddRequest{Request: mustRequest(t, "tty:3"), RequestID: "r1"})
			return err
		}, spec.CodeInsufficientResources},
		{"del unknown exits 0", "", func(p *invoke.Plugin) error { return p.Del(ctx, "unknown") }, spec.CodeUnknownRequestID},
		{"del state error exits 0", "", func(p *invoke.Plugin) error { return p.Del(ctx, "broken") }, spec.CodeStateError},
		{"error document with exit 0", "errdoc0", func(p *invoke.Plugin) error { _, err := p.Info(ctx); return err }, spec.CodePluginMin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.run(newPlugin(tt.mode))
			var e *spec.Error
			if !errors.As(err, &e) || e.Code != tt.code || spec.CodeOf(err) != tt.code {
				t.Fatalf("error = %v, want a *spec.Error with code %d", err, tt.code)
			}
			// skel writes the code's message, and a generic one for
			// plugin-specific codes (100+) whose plugin gave none.
			if e.CDIVersion != spec.Current || e.Msg == "" {
				t.Errorf("error document = %+v, want cdiVersion %s and the msg skel writes", e, spec.Current)
			}
		})
	}
}

// TestProcessMisbehaviour: each way a plugin can fail to answer maps to
// its sentinel, and the message quotes the plugin's stderr.
func TestProcessMisbehaviour(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode     string
		want     error
		contains string
	}{
		{"garbage", invoke.ErrBadOutput, "garbage mode: printing junk"},
		{"garbage", invoke.ErrBadOutput, "this is not JSON"},
		{"silent", invoke.ErrBadOutput, "silent mode: failing without a document"},
		{"signal", invoke.ErrExec, "killed"},
		{"huge", invoke.ErrBadOutput, "more than"},
		{"wrongversion", invoke.ErrBadOutput, `asked for "` + spec.Current + `"`},
		{"twodocs", invoke.ErrBadOutput, "more than one"},
		{"alien", invoke.ErrIncompatible, "9.9.9"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			_, err := newPlugin(tt.mode).Info(context.Background())
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.contains) {
				t.Fatalf("Info error = %v; want %v mentioning %q", err, tt.want, tt.contains)
			}
			if spec.CodeOf(err) != 0 {
				t.Errorf("misbehaviour reported as a plugin error document: %v", err)
			}
		})
	}
}

// TestProcessTimeout: a hung plugin is killed with everything it started,
// and a grandchild that escaped its process group and holds stdout does not
// block the caller past WaitDelay.
func TestProcessTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	for _, mode := range []string{"hang", "fork", "escape"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			p := newPlugin(mode)
			p.Timeout = timeout
			start := time.Now()
			_, err := p.Info(context.Background())
			elapsed := time.Since(start)
			if !errors.Is(err, invoke.ErrTimeout) {
				t.Fatalf("Info error = %v, want ErrTimeout", err)
			}
			if !strings.Contains(err.Error(), "testplugin: INFO") {
				t.Errorf("timeout error lacks the plugin's stderr: %v", err)
			}
			if elapsed > 2*timeout+time.Second {
				t.Fatalf("Info returned after %v, want about %v", elapsed, timeout)
			}
		})
	}
}

// TestProcessOrphan: a plugin that answers and exits while a grandchild
// still holds stdout succeeds after WaitDelay instead of waiting for it.
func TestProcessOrphan(t *testing.T) {
	t.Parallel()
	start := time.Now()
	info, err := newPlugin("orphan").Info(context.Background())
	if err != nil || info.Counts["tty"] != 2 {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Fatalf("Info took %v; the grandchild's stdout was waited for", elapsed)
	}
}

func TestProcessCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := newPlugin("hang").Info(ctx)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, invoke.ErrExec) {
		t.Fatalf("Info error = %v, want ErrExec wrapping context.Canceled", err)
	}
}

// TestProcessEnvironment: a plugin gets the protocol's variables and PATH,
// nothing of the caller's environment.
func TestProcessEnvironment(t *testing.T) {
	t.Parallel()
	r, err := newPlugin("env").Add(context.Background(), invoke.AddRequest{Request: mustRequest(t, "tty:1"), RequestID: "r1", NUMANodes: []int{1, 0}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"CDI_COMMAND", "CDI_REQUEST", "CDI_REQUEST_ID", "CDI_REQUEST_NUMA_LOCALITY", "CDI_VERSION", "PATH"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("plugin environment = %v, want exactly %v", keys, want)
	}
	if r.Env["CDI_REQUEST_NUMA_LOCALITY"] != "1,0" || r.Env["CDI_VERSION"] != spec.Current || r.Env["PATH"] != os.Getenv("PATH") {
		t.Errorf("plugin environment values = %v", r.Env)
	}
}

func TestProcessNegotiation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := newPlugin("old")
	if v, err := old.Negotiate(ctx); err != nil || v != spec.Version002 {
		t.Fatalf("Negotiate with a 0.0.2 plugin = %q, %v", v, err)
	}
	add, err := old.Add(ctx, invoke.AddRequest{Request: mustRequest(t, "tty:1"), RequestID: "r1"})
	if err != nil || add.CDIVersion != spec.Version002 || add.CDIDevices != nil {
		t.Fatalf("Add in 0.0.2 = %+v, %v", add, err)
	}
	if _, err := old.List(ctx); !errors.Is(err, invoke.ErrIncompatible) {
		t.Errorf("List with a 0.0.2 plugin: %v, want ErrIncompatible", err)
	}
	if _, err := old.GC(ctx, nil); !errors.Is(err, invoke.ErrIncompatible) {
		t.Errorf("GC with a 0.0.2 plugin: %v, want ErrIncompatible", err)
	}
	pinned := invoke.AddRequest{Request: mustRequest(t, "tty:1"), RequestID: "r1", Devices: []string{"tty0"}}
	if _, err := old.Add(ctx, pinned); !errors.Is(err, invoke.ErrIncompatible) {
		t.Errorf("pinned Add with a 0.0.2 plugin: %v, want ErrIncompatible", err)
	}

	forced := newPlugin("")
	forced.CDIVersion = spec.Version001
	info, err := forced.Info(ctx)
	if err != nil || info.CDIVersion != spec.Version001 || info.Devices != nil {
		t.Fatalf("Info with CDIVersion 0.0.1 = %+v, %v", info, err)
	}
	forced.CDIVersion = "0.999.0"
	if _, err := forced.Info(ctx); spec.CodeOf(err) != spec.CodeIncompatibleVersion {
		t.Fatalf("Info with an unsupported CDIVersion = %v, want code 1 from the plugin", err)
	}
}

func TestProcessStartFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "notexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noInterp := filepath.Join(dir, "nointerp")
	if err := os.WriteFile(noInterp, []byte("#!/nonexistent/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want error
	}{
		{filepath.Join(dir, "missing"), invoke.ErrNotFound},
		{notExec, invoke.ErrExec},
		{noInterp, invoke.ErrNotFound},
	}
	for _, tt := range tests {
		p := &invoke.Plugin{Path: tt.path, Config: testConf("")}
		if _, err := p.Version(context.Background()); !errors.Is(err, tt.want) {
			t.Errorf("%s: Version error = %v, want %v", filepath.Base(tt.path), err, tt.want)
		}
	}
}

func TestNewPlugin(t *testing.T) {
	t.Parallel()
	c := &invoke.Conf{Path: "/etc/cdi/tty.d/t.conf", Config: spec.Config{Plugin: "testplugin", Bytes: testConf("")}}
	p, err := invoke.NewPlugin(c, []string{t.TempDir(), pluginDir})
	if err != nil || p.Path != filepath.Join(pluginDir, "testplugin") || !bytes.Equal(p.Config, c.Bytes) {
		t.Fatalf("NewPlugin = %+v, %v", p, err)
	}
	c.Plugin = "nosuchplugin"
	if _, err := invoke.NewPlugin(c, []string{pluginDir}); !errors.Is(err, invoke.ErrNotFound) || !strings.Contains(err.Error(), c.Path) {
		t.Fatalf("NewPlugin of a missing binary: %v, want ErrNotFound naming the drop-in", err)
	}
}

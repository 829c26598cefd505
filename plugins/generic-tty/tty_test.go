package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
)

// plugin is the built generic-tty binary, exec'd as a runtime would.
var plugin string

func TestMain(m *testing.M) {
	exectest.Main(m, ".", &plugin)
}

// draftConf is the draft's /etc/cdi/tty.d/generic.conf with root pointed at
// the fixture tree and the state in a fresh directory.
func draftConf(t *testing.T, version string) []byte {
	return exectest.Conf(t, version, "tty", "generic-tty", map[string]any{
		"num_system_reserved": 12, "root": exectest.FixtureRoot(t), "stateDir": t.TempDir(),
	})
}

func TestDraftExamples(t *testing.T) {
	conf := draftConf(t, "0.0.1")
	run := func(kv ...string) exectest.Result { return exectest.Run(t, plugin, exectest.Env(kv...), conf) }

	t.Run("INFO", func(t *testing.T) {
		r := run("CDI_COMMAND", "INFO")
		want := map[string]any{"cdiVersion": "0.0.1", "tty": 32.0}
		if r.Status != 0 || !reflect.DeepEqual(r.Doc, want) {
			t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
		}
	})
	t.Run("ADD tty:3", func(t *testing.T) {
		r := run("CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "tty:3", "CDI_REQUEST_ID", "7890")
		want := map[string]any{"cdiVersion": "0.0.1", "devices": []any{"/dev/tty13", "/dev/tty14", "/dev/tty15"}}
		if r.Status != 0 || !reflect.DeepEqual(r.Doc, want) {
			t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
		}
	})
	t.Run("DEL unknown", func(t *testing.T) {
		r := run("CDI_VERSION", "0.0.1", "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "3456")
		want := map[string]any{"cdiVersion": "0.0.1", "code": 5.0, "msg": "Unknown request ID"}
		if r.Status != 0 || !reflect.DeepEqual(r.Doc, want) {
			t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
		}
	})
	t.Run("DEL known", func(t *testing.T) {
		r := run("CDI_VERSION", "0.0.1", "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "7890")
		if r.Status != 0 || len(r.Stdout) != 0 {
			t.Fatalf("status %d, stdout %q; want 0 and nothing", r.Status, r.Stdout)
		}
	})
	t.Run("VERSION", func(t *testing.T) {
		r := run("CDI_COMMAND", "VERSION")
		// pluginVersion is the binary's build: a test binary's is devel.
		want := map[string]any{"cdiVersion": "0.2.0", "supportedVersions": []any{"0.0.1", "0.0.2", "0.1.0", "0.2.0"}, "pluginVersion": "devel"}
		if r.Status != 0 || !reflect.DeepEqual(r.Doc, want) {
			t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
		}
	})
	t.Run("unknown CDI_VERSION", func(t *testing.T) {
		r := run("CDI_VERSION", "0.999")
		want := map[string]any{"cdiVersion": "0.0.1", "code": 1.0, "msg": "Incompatible CDI version", "details": "Unsupported version: 0.999"}
		if r.Status != 1 || !reflect.DeepEqual(r.Doc, want) {
			t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
		}
	})
	t.Run("unknown CDI_COMMAND", func(t *testing.T) {
		r := run("CDI_VERSION", "0.0.1", "CDI_COMMAND", "MYCMD")
		want := map[string]any{"cdiVersion": "0.0.1", "code": 3.0, "msg": "Command unsupported", "details": "Unsupported command: MYCMD"}
		if r.Status != 1 || !reflect.DeepEqual(r.Doc, want) {
			t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
		}
	})
}

// TestEveryErrorCode triggers each well-known code through a real exec.
func TestEveryErrorCode(t *testing.T) {
	conf := draftConf(t, "0.1.0")
	stateDir := t.TempDir()
	withState := exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{"root": exectest.FixtureRoot(t), "stateDir": stateDir})
	corrupt := t.TempDir()
	if err := os.MkdirAll(filepath.Join(corrupt, "tty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, "tty", "generic-tty.json"), []byte("{torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(notDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notDir, "dev"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	add := func(req, id string, extra ...string) map[string]string {
		return exectest.Env(append([]string{"CDI_VERSION", "0.1.0", "CDI_COMMAND", "ADD", "CDI_REQUEST", req, "CDI_REQUEST_ID", id}, extra...)...)
	}
	// Two allocations that the conflict case below collides with.
	if r := exectest.Run(t, plugin, add("tty:1", "held"), withState); r.Status != 0 {
		t.Fatalf("setup ADD: %s", r.Stdout)
	}
	tests := []struct {
		code spec.Code
		env  map[string]string
		conf []byte
	}{
		{spec.CodeIncompatibleVersion, exectest.Env("CDI_VERSION", "0.999", "CDI_COMMAND", "INFO"), conf},
		{spec.CodeIncompatibleConfigVersion, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), exectest.Conf(t, "0.9.9", "tty", "generic-tty", nil)},
		{spec.CodeUnsupportedCommand, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "RESET"), conf},
		{spec.CodeUnsupportedResource, add("tty-memory:1", "r4"), conf},
		{spec.CodeUnknownRequestID, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "nobody"), conf},
		{spec.CodeMissingParameter, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "ADD"), conf},
		{spec.CodeInvalidParameter, add("tty:0", "r7"), conf},
		{spec.CodeInvalidConfig, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), []byte(`{"cdiVersion":"0.1.0"`)},
		{spec.CodeTypeMismatch, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), exectest.Conf(t, "0.1.0", "gpu", "generic-tty", nil)},
		{spec.CodeInsufficientResources, add("tty:33", "r10"), conf},
		{spec.CodeRequestConflict, add("tty:2", "held"), withState},
		{spec.CodeUnknownDevice, add("tty:1", "r12", "CDI_REQUEST_DEVICES", "tty99"), conf},
		{spec.CodeStateError, add("tty:1", "r13"), exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{"root": exectest.FixtureRoot(t), "stateDir": corrupt})},
		{spec.CodeInternal, add("tty:1", "r14"), exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{"root": notDir, "stateDir": t.TempDir()})},
		{spec.CodeUnknownArg, add("tty:1", "r15"), exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{"num_system_reservd": 20})},
	}
	if len(tests) != len(spec.WellKnownCodes()) {
		t.Fatalf("%d cases for %d well-known codes", len(tests), len(spec.WellKnownCodes()))
	}
	for _, tt := range tests {
		t.Run(tt.code.Message(), func(t *testing.T) {
			r := exectest.Run(t, plugin, tt.env, tt.conf)
			wantStatus := 1
			if tt.env["CDI_COMMAND"] == "DEL" {
				wantStatus = 0
			}
			if r.Code() != int(tt.code) || r.Status != wantStatus || r.Doc["msg"] != tt.code.Message() {
				t.Fatalf("status %d, stdout %s, stderr %s; want code %d, status %d", r.Status, r.Stdout, r.Stderr, tt.code, wantStatus)
			}
			// An operator must be able to find the broken file from the
			// error alone.
			stateFile := filepath.Join(corrupt, "tty", "generic-tty.json")
			if details, _ := r.Doc["details"].(string); tt.code == spec.CodeStateError && !strings.Contains(details, stateFile) {
				t.Errorf("details %q do not name %s", details, stateFile)
			}
		})
	}
}

// hostileRoot is a root whose dev holds terminals 13 to 15: tty13 a link
// to a file outside dev (/etc/shadow of the root), tty14 a fixture
// stand-in for a device node, tty15 a FIFO.
func hostileRoot(t *testing.T) string {
	root := t.TempDir()
	for _, dir := range []string{"dev", "etc"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "shadow"), []byte("root:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../etc/shadow", filepath.Join(root, "dev", "tty13")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "dev", "tty14"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "dev", "tty15"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// Only device nodes are offered: a link to a file and a FIFO named like
// terminals are skipped, each with a note on stderr.
func TestOnlyDeviceNodesOffered(t *testing.T) {
	conf := exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"num_system_reserved": 12, "root": hostileRoot(t), "stateDir": t.TempDir()})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.2.0", "CDI_COMMAND", "INFO"), conf)
	var info spec.InfoResult
	r.Decode(t, &info)
	if len(info.Devices) != 1 || info.Devices[0].ID != "tty14" {
		t.Fatalf("inventory %+v, want tty14 alone", info.Devices)
	}
	if want := map[string]int{spec.SkipNotDeviceNode: 2}; !reflect.DeepEqual(info.Skipped, want) {
		t.Errorf("skipped_devices %v, want %v", info.Skipped, want)
	}
	for _, want := range []string{`skipped device "tty13" (not-device-node)`, "regular file of 12 bytes", `skipped device "tty15" (not-device-node)`, "named pipe"} {
		if !strings.Contains(string(r.Stderr), want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
}

// A root whose dev is a link out of it (to the host's /dev) is not
// followed: the host's terminals are never offered as the root's.
func TestRootDevLinkOutRefused(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/dev", filepath.Join(root, "dev")); err != nil {
		t.Fatal(err)
	}
	conf := exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"num_system_reserved": 12, "root": root, "stateDir": t.TempDir()})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
	var info spec.InfoResult
	r.Decode(t, &info)
	if len(info.Devices) != 0 {
		t.Fatalf("INFO offered %d of the host's terminals through a link out of root", len(info.Devices))
	}
	if hostHasTerminals := exists("/dev/tty13"); hostHasTerminals && !strings.Contains(string(r.Stderr), "leads out of root") {
		t.Errorf("stderr does not say why the host's terminals are skipped:\n%s", r.Stderr)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// INFO and LIST read: with no state yet they answer, and create nothing,
// so that a user who cannot write the state directory can still read
// (cditool info as non-root failed with code 13 on a mkdir).
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "never-made")
	conf := exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"num_system_reserved": 12, "root": exectest.FixtureRoot(t), "stateDir": stateDir})
	for _, cmd := range []string{"INFO", "LIST"} {
		r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", cmd), conf)
		if r.Status != 0 {
			t.Errorf("%s: status %d, %s", cmd, r.Status, r.Stdout)
		}
	}
	if _, err := os.Lstat(stateDir); !os.IsNotExist(err) {
		t.Errorf("INFO and LIST created %s (%v)", stateDir, err)
	}
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "ADD", "CDI_REQUEST", "tty:1", "CDI_REQUEST_ID", "r1"), conf)
	if r.Status != 0 {
		t.Fatalf("ADD: %s", r.Stdout)
	}
	var l spec.ListResult
	exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "LIST"), conf).Decode(t, &l)
	if len(l.Allocations) != 1 {
		t.Errorf("LIST after an ADD: %+v", l.Allocations)
	}
}

// A terminal's properties are made for INFO, which shows them, and not
// for an ADD, which shows none.
func TestPropertiesOnlyWhereShown(t *testing.T) {
	cfg, err := spec.ParseConfig(draftConf(t, "0.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, skip := range []bool{false, true} {
		h := &engine.Host{Config: cfg, Root: "/", FS: os.DirFS(exectest.FixtureRoot(t)), Stderr: io.Discard, SkipProperties: skip}
		inv, err := discover(h)
		if err != nil || len(inv.Devices) == 0 {
			t.Fatalf("discover: %v, %d devices", err, len(inv.Devices))
		}
		var want map[string]string
		if !skip {
			want = map[string]string{"terminal": "13"}
		}
		if got := inv.Devices[0].Properties; !reflect.DeepEqual(got, want) {
			t.Errorf("SkipProperties %v: %s has properties %v, want %v", skip, inv.Devices[0].ID, got, want)
		}
	}
}

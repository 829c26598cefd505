package main

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// plugin is the built drm binary, exec'd as a runtime would.
var plugin string

func TestMain(m *testing.M) {
	exectest.Main(m, "github.com/cdiexec/cdi/plugins/drm", &plugin)
}

// draftConf is the draft's /etc/cdi/gpu.d/drm.conf with the whitelist
// naming the fixture's first GPU (Intel), root at the fixture and a fresh
// state directory.
func draftConf(t *testing.T) []byte {
	return exectest.Conf(t, "0.0.1", "gpu", "drm", map[string]any{
		"want_device_nodes": []string{"primary", "render"}, "vendorid_whitelist": []string{"0x8086", "0x2345"},
		"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(),
	})
}

func TestDraftExamples(t *testing.T) {
	conf := draftConf(t)
	run := func(kv ...string) exectest.Result { return exectest.Run(t, plugin, exectest.Env(kv...), conf) }
	tests := []struct {
		name   string
		env    []string
		status int
		want   map[string]any // nil: no output
	}{
		{"INFO", []string{"CDI_COMMAND", "INFO"}, 0, map[string]any{"cdiVersion": "0.0.1", "gpu": 1.0}},
		{"ADD gpu:1", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1", "CDI_REQUEST_ID", "1234"}, 0,
			map[string]any{"cdiVersion": "0.0.1", "devices": []any{"/dev/dri/card0", "/dev/dri/renderD128"}}},
		{"ADD repeated", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1", "CDI_REQUEST_ID", "1234"}, 0,
			map[string]any{"cdiVersion": "0.0.1", "devices": []any{"/dev/dri/card0", "/dev/dri/renderD128"}}},
		{"ADD unknown sub-resource", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1,gpu-memory:2048", "CDI_REQUEST_ID", "3456"}, 1,
			map[string]any{"cdiVersion": "0.0.1", "code": 4.0, "msg": "resource-spec unsupported", "details": "Unsupported resource-spec: gpu-memory"}},
		{"ADD the draft's unknown sub-resource", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1,gpu-memory:2048Mi", "CDI_REQUEST_ID", "3456"}, 1,
			map[string]any{"cdiVersion": "0.0.1", "code": 4.0, "msg": "resource-spec unsupported", "details": "Unsupported resource-spec: gpu-memory"}},
		{"ADD a malformed amount", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:2048Mi", "CDI_REQUEST_ID", "3456"}, 1,
			map[string]any{"cdiVersion": "0.0.1", "code": 7.0, "msg": "Invalid parameter",
				"details": `CDI_REQUEST: resource-spec "gpu": malformed: amount "2048Mi" is not a positive integer of at most 9 digits without leading zeros`}},
		{"ADD beyond the whitelist", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1", "CDI_REQUEST_ID", "5678"}, 1,
			map[string]any{"cdiVersion": "0.0.1", "code": 10.0, "msg": "Insufficient resources", "details": "gpu: 1 requested, 0 available"}},
		{"DEL", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "1234"}, 0, nil},
		{"DEL again", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "1234"}, 0,
			map[string]any{"cdiVersion": "0.0.1", "code": 5.0, "msg": "Unknown request ID"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(tt.env...)
			if r.Status != tt.status || !reflect.DeepEqual(r.Doc, tt.want) {
				t.Fatalf("status %d, stdout %s, stderr %s; want %d, %v", r.Status, r.Stdout, r.Stderr, tt.status, tt.want)
			}
		})
	}
}

// allGPUs serves every GPU of the fixture in 0.1.0.
func allGPUs(t *testing.T, extra map[string]any) []byte {
	args := map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir()}
	for k, v := range extra {
		args[k] = v
	}
	return exectest.Conf(t, "0.1.0", "gpu", "drm", args)
}

func TestInventory(t *testing.T) {
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), allGPUs(t, nil))
	var info spec.InfoResult
	r.Decode(t, &info)
	if r.Status != 0 || info.Counts["gpu"] != 4 || len(info.Counts) != 1 || len(info.Devices) != 4 {
		t.Fatalf("status %d, %s", r.Status, r.Stdout)
	}
	wantNUMA := []int{-1, 0, 0, 1}
	for i, id := range []string{"0000:00:02.0", "0000:03:00.0", "0000:41:00.0", "0000:81:00.0"} {
		d := info.Devices[i]
		n := -1
		if d.NUMANode != nil {
			n = *d.NUMANode
		}
		if d.ID != id || n != wantNUMA[i] || !d.Healthy || d.Shared || len(d.DeviceNodes) != 2 || d.Properties["pciAddress"] != id {
			t.Errorf("device %d: %+v; want id %s, NUMA %d", i, d, id, wantNUMA[i])
		}
	}
}

func TestAllocation(t *testing.T) {
	tests := []struct {
		name  string
		args  map[string]any
		env   []string
		nodes []any
		numa  []any
	}{
		{"NUMA preference", nil, []string{"CDI_REQUEST", "gpu:1", "CDI_REQUEST_NUMA_LOCALITY", "1"},
			[]any{"/dev/dri/card3", "/dev/dri/renderD131"}, []any{1.0}},
		{"pinned", nil, []string{"CDI_REQUEST", "gpu:1", "CDI_REQUEST_DEVICES", "0000:41:00.0"},
			[]any{"/dev/dri/card2", "/dev/dri/renderD130"}, []any{0.0}},
		{"render nodes of two GPUs", map[string]any{"want_device_nodes": []string{"render"}}, []string{"CDI_REQUEST", "gpu:2"},
			[]any{"/dev/dri/renderD128", "/dev/dri/renderD129"}, []any{0.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := append([]string{"CDI_VERSION", "0.1.0", "CDI_COMMAND", "ADD", "CDI_REQUEST_ID", "r1"}, tt.env...)
			r := exectest.Run(t, plugin, exectest.Env(env...), allGPUs(t, tt.args))
			if r.Status != 0 || !reflect.DeepEqual(r.Doc["devices"], tt.nodes) || !reflect.DeepEqual(r.Doc["numa_locality"], tt.numa) {
				t.Fatalf("status %d, %s; want devices %v, numa_locality %v", r.Status, r.Stdout, tt.nodes, tt.numa)
			}
		})
	}
}

func TestInvalidArgs(t *testing.T) {
	conf := allGPUs(t, map[string]any{"want_device_nodes": []string{"primary", "control"}})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
	if r.Status != 1 || r.Code() != int(spec.CodeInvalidConfig) {
		t.Fatalf("status %d, %s; want code %d", r.Status, r.Stdout, spec.CodeInvalidConfig)
	}
}

// TestShippedConf runs conf.d/gpu.d/drm.conf against the fixture.
func TestShippedConf(t *testing.T) {
	data, err := os.ReadFile("../../conf.d/gpu.d/drm.conf")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := spec.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if err := json.Unmarshal(cfg.Args, &args); err != nil {
		t.Fatal(err)
	}
	if cfg.Type != "gpu" || cfg.Plugin != "drm" || args["root"] != "/" {
		t.Fatalf("unexpected drop-in %s", data)
	}
	conf := exectest.Conf(t, cfg.CDIVersion, cfg.Type, cfg.Plugin, map[string]any{
		"want_device_nodes": args["want_device_nodes"], "vendorid_whitelist": args["vendorid_whitelist"],
		"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(),
	})
	r := exectest.Run(t, plugin, exectest.Env("CDI_COMMAND", "INFO"), conf)
	if r.Status != 0 || r.Doc["gpu"] == nil {
		t.Fatalf("status %d, %s %s", r.Status, r.Stdout, r.Stderr)
	}
}

// TestRealHost runs INFO against this machine's own /sys and /dev, read
// only: whatever is there (often no GPU at all), discovery must not fail.
func TestRealHost(t *testing.T) {
	conf := exectest.Conf(t, "0.1.0", "gpu", "drm", map[string]any{"root": "/", "stateDir": t.TempDir()})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
	if r.Status != 0 {
		t.Fatalf("status %d, %s %s", r.Status, r.Stdout, r.Stderr)
	}
}

// TestReleaseWithoutDevices checks that DEL, LIST and GC read only the
// state: with a device tree that cannot be read, what was allocated can
// still be listed and released.
func TestReleaseWithoutDevices(t *testing.T) {
	state := t.TempDir()
	conf := func(root string) []byte {
		return exectest.Conf(t, "0.1.0", "gpu", "drm", map[string]any{"root": root, "stateDir": state})
	}
	run := func(root string, kv ...string) exectest.Result {
		return exectest.Run(t, plugin, exectest.Env(append([]string{"CDI_VERSION", "0.1.0"}, kv...)...), conf(root))
	}
	// sys/class/drm a file, not a directory: discovery fails.
	fixture, gone := exectest.FixtureRoot(t), t.TempDir()
	if err := os.MkdirAll(gone+"/sys/class", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gone+"/sys/class/drm", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if r := run(fixture, "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1", "CDI_REQUEST_ID", id); r.Status != 0 {
			t.Fatalf("ADD %s: status %d, %s %s", id, r.Status, r.Stdout, r.Stderr)
		}
	}
	if r := run(gone, "CDI_COMMAND", "INFO"); r.Code() != int(spec.CodeInternal) {
		t.Fatalf("INFO without a device tree: %s, want code %d", r.Stdout, spec.CodeInternal)
	}
	var list spec.ListResult
	run(gone, "CDI_COMMAND", "LIST").Decode(t, &list)
	if len(list.Allocations) != 2 {
		t.Fatalf("LIST without a device tree: %+v, want a and b", list)
	}
	if r := run(gone, "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "a"); r.Status != 0 || len(r.Stdout) != 0 {
		t.Fatalf("DEL without a device tree: status %d, %s", r.Status, r.Stdout)
	}
	var gc spec.GCResult
	run(gone, "CDI_COMMAND", "GC", "CDI_VALID_REQUEST_IDS", "").Decode(t, &gc)
	if !reflect.DeepEqual(gc.Released, []string{"b"}) {
		t.Fatalf("GC without a device tree released %v, want [b]", gc.Released)
	}
}

package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// plugin is the built generic binary, exec'd as a runtime would.
var plugin string

func TestMain(m *testing.M) {
	exectest.Main(m, "github.com/cdiexec/cdi/plugins/generic", &plugin)
}

// shippedConf is conf.d/dev.d/generic.conf with root at the fixture and a
// fresh state directory, as the given version.
func shippedConf(t *testing.T, version string) []byte {
	doc := exectest.ShippedDropIn(t, "dev.d/generic.conf", t.TempDir())
	doc["cdiVersion"] = version
	return exectest.Marshal(t, doc)
}

func TestShippedConf(t *testing.T) {
	conf := shippedConf(t, "0.1.0")
	run := func(kv ...string) exectest.Result {
		return exectest.Run(t, plugin, exectest.Env(append([]string{"CDI_VERSION", "0.1.0"}, kv...)...), conf)
	}
	t.Run("INFO", func(t *testing.T) {
		r := run("CDI_COMMAND", "INFO")
		var info spec.InfoResult
		r.Decode(t, &info)
		want := map[string]int{"dev": 0, "dev-serial": 3, "dev-video": 4, "dev-sound": 1}
		if r.Status != 0 || !reflect.DeepEqual(info.Counts, want) || len(info.Devices) != 8 {
			t.Fatalf("status %d, %s; want counts %v", r.Status, r.Stdout, want)
		}
	})
	tests := []struct {
		name    string
		env     []string
		devices []any
	}{
		{"serial near NUMA node 1 first", []string{"CDI_REQUEST", "dev-serial:2", "CDI_REQUEST_NUMA_LOCALITY", "1", "CDI_REQUEST_ID", "a"},
			[]any{"/dev/ttyUSB1", "/dev/ttyACM0"}},
		{"sound bundle and a camera at once", []string{"CDI_REQUEST", "dev-sound:1,dev-video:1", "CDI_REQUEST_ID", "b"},
			[]any{"/dev/snd/controlC0", "/dev/snd/pcmC0D0c", "/dev/snd/pcmC0D0p", "/dev/snd/timer", "/dev/video0"}},
		{"pinned", []string{"CDI_REQUEST", "dev-video:1", "CDI_REQUEST_DEVICES", "video-video3", "CDI_REQUEST_ID", "c"},
			[]any{"/dev/video3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(append([]string{"CDI_COMMAND", "ADD"}, tt.env...)...)
			if r.Status != 0 || !reflect.DeepEqual(r.Doc["devices"], tt.devices) {
				t.Fatalf("status %d, %s; want devices %v", r.Status, r.Stdout, tt.devices)
			}
		})
	}
	t.Run("sound is taken", func(t *testing.T) {
		r := run("CDI_COMMAND", "ADD", "CDI_REQUEST", "dev-sound:1", "CDI_REQUEST_ID", "d")
		if r.Status != 1 || r.Code() != int(spec.CodeInsufficientResources) {
			t.Fatalf("status %d, %s; want code %d", r.Status, r.Stdout, spec.CodeInsufficientResources)
		}
	})
	t.Run("unserved subtype", func(t *testing.T) {
		r := run("CDI_COMMAND", "ADD", "CDI_REQUEST", "dev-gpu:1", "CDI_REQUEST_ID", "e")
		if r.Status != 1 || r.Code() != int(spec.CodeUnsupportedResource) || r.Doc["details"] != "Unsupported resource-spec: dev-gpu" {
			t.Fatalf("status %d, %s; want code %d", r.Status, r.Stdout, spec.CodeUnsupportedResource)
		}
	})
}

// TestDraftVersion checks that a 0.0.1 caller gets only the draft's fields.
func TestDraftVersion(t *testing.T) {
	conf := shippedConf(t, "0.0.1")
	r := exectest.Run(t, plugin, exectest.Env("CDI_COMMAND", "INFO"), conf)
	want := map[string]any{"cdiVersion": "0.0.1", "dev": 0.0, "dev-serial": 3.0, "dev-video": 4.0, "dev-sound": 1.0}
	if r.Status != 0 || !reflect.DeepEqual(r.Doc, want) {
		t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
	}
	r = exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "dev-serial:1", "CDI_REQUEST_ID", "x"), conf)
	want = map[string]any{"cdiVersion": "0.0.1", "devices": []any{"/dev/ttyACM0"}, "numa_locality": []any{0.0}}
	if r.Status != 0 || !reflect.DeepEqual(r.Doc, want) {
		t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
	}
}

func TestInvalidGroups(t *testing.T) {
	conf := exectest.Conf(t, "0.1.0", "dev", "generic", map[string]any{
		"stateDir": t.TempDir(), "groups": []any{map[string]any{"name": "serial-usb", "paths": []string{"/dev/ttyUSB*"}}},
	})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
	if r.Status != 1 || r.Code() != int(spec.CodeInvalidConfig) {
		t.Fatalf("status %d, %s; want code %d", r.Status, r.Stdout, spec.CodeInvalidConfig)
	}
}

// A node name with a newline, which the glob matches like any other, is
// not offered: printed, it would forge a line wherever it went.
func TestNodeNameWithNewlineSkipped(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ttyUSB0", "ttyUSB1\nforged"} {
		if err := os.WriteFile(filepath.Join(root, "dev", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := exectest.Conf(t, "0.1.0", "dev", "generic", map[string]any{"root": root, "stateDir": t.TempDir(),
		"groups": []map[string]any{{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
	var info spec.InfoResult
	r.Decode(t, &info)
	if len(info.Devices) != 1 || info.Devices[0].DeviceNodes[0].HostPath != "/dev/ttyUSB0" {
		t.Fatalf("inventory %+v, want /dev/ttyUSB0 alone; stderr %s", info.Devices, r.Stderr)
	}
}

// TestSkippedDevicesLeaveATrace: a node whose name holds a control
// character, a link out of the root, a FIFO and a name too long for a
// device id are not offered, and each is one line on stderr, which says
// which and why and forges no other, and a count in 0.2.0's
// skipped_devices.
func TestSkippedDevicesLeaveATrace(t *testing.T) {
	args := map[string]any{"root": exectest.SkippingRoot(t, 2), "stateDir": t.TempDir(),
		"groups": []any{map[string]any{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}}
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.2.0", "CDI_COMMAND", "INFO"), exectest.Conf(t, "0.1.0", "dev", "generic", args))
	var info spec.InfoResult
	r.Decode(t, &info)
	if len(info.Devices) != 1 || info.Devices[0].ID != "serial-ttyUSB0" {
		t.Fatalf("inventory %+v, want serial-ttyUSB0 alone", info.Devices)
	}
	want := map[string]int{spec.SkipBadPath: 2, spec.SkipOutsideRoot: 2, spec.SkipBadID: 2, spec.SkipNotDeviceNode: 2}
	if !reflect.DeepEqual(info.Skipped, want) {
		t.Errorf("skipped_devices %v, want %v", info.Skipped, want)
	}
	lines := strings.Split(strings.TrimSuffix(string(r.Stderr), "\n"), "\n")
	if len(lines) != 8 {
		t.Fatalf("stderr has %d lines, want one per skipped device:\n%s", len(lines), r.Stderr)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "skipped device ") || strings.ContainsAny(l, "\r\x00\x1b") {
			t.Errorf("stderr line %q: want \"skipped device ...\" without control characters", l)
		}
	}
	for _, reason := range []string{"(bad-path)", "(outside-root)", "(bad-id)", "(not-device-node)"} {
		if !strings.Contains(string(r.Stderr), reason) {
			t.Errorf("stderr does not give the reason %s:\n%s", reason, r.Stderr)
		}
	}
	for _, v := range []string{"0.1.0", "0.0.2"} {
		old := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", v, "CDI_COMMAND", "INFO"), exectest.Conf(t, "0.1.0", "dev", "generic", args))
		if _, ok := old.Doc[spec.SkippedKey]; ok || old.Status != 0 {
			t.Errorf("a %s INFO: status %d, %s; want no %s, which a caller of %s may not know", v, old.Status, old.Stdout, spec.SkippedKey, v)
		}
	}
}

package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// jsonLog is a bridge logger at debug into a buffer, and the records it
// holds.
type jsonLog struct{ buf bytes.Buffer }

func (l *jsonLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the records whose msg starts with msg.
func (l *jsonLog) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := rec["msg"].(string); strings.HasPrefix(m, msg) {
			out = append(out, rec)
		}
	}
	return out
}

// TestMisspeltArgSkipsTheDropIn: a drop-in whose plugin refuses an args
// member it does not know (the real generic-tty, code 15) is reported as
// any drop-in that does not load: a skip naming the member, logged, and
// the other drop-ins served.
func TestMisspeltArgSkipsTheDropIn(t *testing.T) {
	d, confDir := newDiscoverer(t)
	var log jsonLog
	d.Logger = log.logger()
	writeConf(t, confDir, "tty", "typo", "generic-tty", map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reservd": 20})
	pools, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 3 || find(pools, "tty-typo") != nil {
		t.Fatalf("pools %v, want the three good ones", names(pools))
	}
	typo := filepath.Join(confDir, "tty.d", "typo.conf")
	skips := d.Skipped()
	if len(skips) != 1 || skips[0].DropIn != typo || !strings.Contains(skips[0].Reason, `"num_system_reservd" (did you mean "num_system_reserved"?)`) ||
		!strings.Contains(skips[0].Reason, "code 15") {
		t.Fatalf("skipped %+v, want %s refused for its misspelt arg", skips, typo)
	}
	if errs := log.records(t, "INFO failed"); len(errs) != 1 || errs[0]["dropIn"] != typo || errs[0]["level"] != "ERROR" {
		t.Errorf("log records %v, want one ERROR for %s", errs, typo)
	}
}

// TestSkippedDevicesReported: the devices the real generic plugin skips
// are counted by drop-in and reason, logged at info when the counts
// change (not at every INFO), and the plugin's own lines, which say which
// and why, are logged at debug.
func TestSkippedDevicesReported(t *testing.T) {
	confDir := t.TempDir()
	args := func(root string) map[string]any {
		return map[string]any{"root": root, "stateDir": t.TempDir(), "groups": []any{map[string]any{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}}
	}
	writeConf(t, confDir, "dev", "usb", "generic", args(exectest.SkippingRoot(t, 1)))
	usb := filepath.Join(confDir, "dev.d", "usb.conf")
	var log jsonLog
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Logger: log.logger()}
	discover := func() {
		t.Helper()
		if pools, err := d.Discover(context.Background()); err != nil || len(pools) != 1 || len(pools[0].Devices) != 1 {
			t.Fatalf("pools %+v, error %v; want dev-serial-usb with ttyUSB0 alone", pools, err)
		}
	}
	discover()
	discover()
	want := map[string]map[string]int{usb: {spec.SkipBadPath: 1, spec.SkipOutsideRoot: 1, spec.SkipNotDeviceNode: 1, spec.SkipBadID: 1}}
	if got := d.SkippedDevices(); !reflect.DeepEqual(got, want) {
		t.Errorf("SkippedDevices() = %v, want %v", got, want)
	}
	changed := log.records(t, "devices the plugin skips changed")
	if len(changed) != 1 || changed[0]["level"] != "INFO" || changed[0]["dropIn"] != usb || changed[0]["skipped"] != 4.0 {
		t.Errorf("change records %v, want one at INFO for %s, skipped 4, after two INFOs that skipped the same", changed, usb)
	}
	stderr := log.records(t, "plugin stderr")
	if len(stderr) != 2 || stderr[0]["level"] != "DEBUG" || stderr[0]["dropIn"] != usb ||
		strings.Count(stderr[0]["stderr"].(string), "skipped device ") != 4 {
		t.Errorf("stderr records %v, want one per INFO at DEBUG with the plugin's four lines", stderr)
	}

	writeConf(t, confDir, "dev", "usb", "generic", args(exectest.SkippingRoot(t, 0)))
	discover()
	if got := d.SkippedDevices(); len(got) != 0 {
		t.Errorf("SkippedDevices() = %v once the plugin skips nothing", got)
	}
	if changed := log.records(t, "devices the plugin skips changed"); len(changed) != 2 || changed[1]["skipped"] != 0.0 {
		t.Errorf("change records %v, want a second one, skipped 0", changed)
	}
}

// TestPluginStderrBounded: a debug record holds at most MaxStderrLogged
// bytes of a run's stderr and says how many more there were; the real
// plugin skipping 120 devices writes far more.
func TestPluginStderrBounded(t *testing.T) {
	confDir := t.TempDir()
	writeConf(t, confDir, "dev", "usb", "generic", map[string]any{"root": exectest.SkippingRoot(t, 30), "stateDir": t.TempDir(),
		"groups": []any{map[string]any{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}})
	var log jsonLog
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Logger: log.logger()}
	if _, err := d.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	stderr := log.records(t, "plugin stderr")
	if len(stderr) != 1 {
		t.Fatalf("stderr records %v, want one", stderr)
	}
	text, _ := stderr[0]["stderr"].(string)
	more, _ := stderr[0]["truncatedBytes"].(float64)
	if len(text) > MaxStderrLogged || more < MaxStderrLogged {
		t.Errorf("record of %d bytes, %v more; want at most %d and the rest counted", len(text), more, MaxStderrLogged)
	}
	if got := d.SkippedDevices(); got[filepath.Join(confDir, "dev.d", "usb.conf")][spec.SkipNotDeviceNode] != 30 {
		t.Errorf("SkippedDevices() = %v, want 30 FIFOs among them", got)
	}
}

func TestSkippedDevicesFiltered(t *testing.T) {
	many := map[string]int{}
	for i := range 40 {
		many["r"+strings.Repeat("a", i%30)+string(rune('a'+i/30))] = 1
	}
	for _, tc := range []struct {
		name string
		in   map[string]int
		want int // reasons kept
	}{
		{"none", nil, 0},
		{"well-formed", map[string]int{"bad-path": 2, "x": 1}, 2},
		{"zero and negative counts", map[string]int{"bad-path": 0, "bad-id": -1}, 0},
		{"malformed reasons", map[string]int{"Bad": 1, "a b": 1, "a\nb": 1, strings.Repeat("a", 33): 1}, 0},
		{"too many", many, spec.MaxSkipReasons},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := skippedDevices(tc.in); len(got) != tc.want {
				t.Errorf("skippedDevices(%v) = %v, want %d reasons", tc.in, got, tc.want)
			}
		})
	}
}

package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec/invoke"
	"github.com/cdiexec/cdi/spec/invoke/fakeexec"
)

// pluginDir holds the real generic-tty and generic plugins, and package
// invoke's test plugin, built once.
var pluginDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &pluginDir, "github.com/cdiexec/cdi/plugins/generic-tty", "github.com/cdiexec/cdi/plugins/generic", "../../spec/invoke/testdata/testplugin")
}
func writeConf(t *testing.T, confDir, typ, id, plugin string, args map[string]any) {
	t.Helper()
	doc := map[string]any{"cdiVersion": "0.1.0", "name": id, "type": typ, "plugin": plugin, "args": args}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(confDir, typ+".d", id+".conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func newDiscoverer(t *testing.T) (*Discoverer, string) {
	confDir := t.TempDir()
	state := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", map[string]any{"root": exectest.FixtureRoot(t), "stateDir": state, "num_system_reserved": 40})
	writeConf(t, confDir, "dev", "usb", "generic", map[string]any{"root": exectest.FixtureRoot(t), "stateDir": state, "capacity": 2,
		"groups": []map[string]any{{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}, {"name": "video", "paths": []string{"/dev/video*"}}}})
	return &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}}, confDir
}

func TestDiscoverPools(t *testing.T) {
	d, _ := newDiscoverer(t)
	pools, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"dev-serial-usb": 2, "dev-video-usb": 4, "tty-generic": 4}
	if len(pools) != len(want) {
		t.Fatalf("pools %v, want %v", names(pools), want)
	}
	for _, p := range pools {
		if len(p.Devices) != want[p.Name] || p.Err != nil {
			t.Errorf("pool %s: %d devices, err %v; want %d", p.Name, len(p.Devices), p.Err, want[p.Name])
		}
		for _, dev := range p.Devices {
			if !dev.Healthy || dev.Resource != p.Resource {
				t.Errorf("pool %s: device %+v", p.Name, dev)
			}
		}
	}
}

func TestFailedInfoKeepsDevicesUnhealthy(t *testing.T) {
	d, confDir := newDiscoverer(t)
	if _, err := d.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	writeConf(t, confDir, "tty", "generic", "generic-tty", map[string]any{"root": broken, "stateDir": t.TempDir()})
	pools, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tty := find(pools, "tty-generic")
	if tty == nil || tty.Err == nil || len(tty.Devices) != 4 {
		t.Fatalf("tty pool after a failed INFO: %+v", tty)
	}
	for _, dev := range tty.Devices {
		if dev.Healthy {
			t.Errorf("device %s still healthy", dev.ID)
		}
	}
	if serial := find(pools, "dev-serial-usb"); serial == nil || !serial.Devices[0].Healthy {
		t.Errorf("another drop-in's pool was affected: %+v", serial)
	}
}

func TestRunNoticesNewDropIn(t *testing.T) {
	d, confDir := newDiscoverer(t)
	got := discoveredAfter(t, d, func() {
		writeConf(t, confDir, "snd", "sound", "generic", map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(),
			"groups": []map[string]any{{"name": "", "paths": []string{"/dev/snd/*"}, "perDevice": "all"}}})
	}, "snd-sound")
	if p := find(got, "snd-sound"); p.Err != nil {
		t.Fatalf("after adding a drop-in: %v", p.Err)
	}
}

// discoveredAfter runs d, polling its directories every 20 ms, waits for
// the first discovery (the three pools of newDiscoverer), calls change,
// and returns the first later discovery that has the pool named want.
// Discoveries without it may come first: a poll can see a drop-in that is
// created but not yet written, and the next poll sees it whole.
func discoveredAfter(t *testing.T, d *Discoverer, change func(), want string) []Pool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	results := make(chan []Pool)
	go d.Run(ctx, time.Hour, 20*time.Millisecond, func(u Update) {
		select {
		case results <- u.Pools:
		case <-ctx.Done():
		}
	})
	if got := <-results; len(got) != 3 {
		t.Fatalf("first run: %v", names(got))
	}
	change()
	deadline := time.After(10 * time.Second)
	var last []Pool
	for {
		select {
		case last = <-results:
			if find(last, want) != nil {
				return last
			}
		case <-deadline:
			t.Fatalf("no discovery found %s; the last one found %v", want, names(last))
			return nil
		}
	}
}

func TestPoolName(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"gpu", "drm"}:           "gpu-drm",
		{"dev-serial", "My_USB"}: "dev-serial-my-usb",
		{"tty", "generic.local"}: "tty-generic-local",
	} {
		if got := PoolName(in[0], in[1]); got != want {
			t.Errorf("PoolName(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}

func find(pools []Pool, name string) *Pool {
	for i := range pools {
		if pools[i].Name == name {
			return &pools[i]
		}
	}
	return nil
}

func names(pools []Pool) []string {
	var out []string
	for _, p := range pools {
		out = append(out, fmt.Sprintf("%s(%d)", p.Name, len(p.Devices)))
	}
	return out
}

// TestDiscoverErrors: only a drop-in directory that cannot be read is an
// error; a broken drop-in or a missing plugin costs that drop-in alone.
func TestDiscoverErrors(t *testing.T) {
	d, confDir := newDiscoverer(t)
	if err := os.WriteFile(filepath.Join(confDir, "tty.d", "broken.conf"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeConf(t, confDir, "cam", "gone", "no-such-plugin", nil)
	pools, err := d.Discover(context.Background())
	if err != nil || len(pools) != 3 {
		t.Fatalf("with a broken drop-in and a missing plugin: pools %v, error %v; want the 3 good pools and no error", names(pools), err)
	}

	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.ConfDir = notDir
	if pools, err := d.Discover(context.Background()); err == nil {
		t.Fatalf("drop-in directory is a file: pools %v and no error", names(pools))
	}

	d.ConfDir = filepath.Join(t.TempDir(), "absent")
	if pools, err := d.Discover(context.Background()); err != nil || len(pools) != 0 {
		t.Fatalf("absent drop-in directory: pools %v, error %v; want none and no error", names(pools), err)
	}
}

// A device whose id CDI refuses as a device name, and a drop-in whose
// pool name CDI refuses as a class, are not offered: a runtime could not
// resolve what the bridge would name them.
func TestDiscoverRefusesWhatCDICannotName(t *testing.T) {
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "good", "generic-tty", nil)
	writeConf(t, confDir, "tty", "bad_", "generic-tty", nil) // pool tty-bad- ends in '-'
	inventory := `{"cdiVersion":"0.1.0","tty":3,"device_inventory":[` +
		`{"id":"tty1","resource":"tty","deviceNodes":[],"healthy":true,"capacity":1,"used":0,"shared":false},` +
		`{"id":"tty2:","resource":"tty","deviceNodes":[],"healthy":true,"capacity":1,"used":0,"shared":false},` +
		`{"id":"-tty3","resource":"tty","deviceNodes":[],"healthy":true,"capacity":1,"used":0,"shared":false}]}`
	var log bytes.Buffer
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Exec: &fakeexec.Exec{Replies: map[string]fakeexec.Reply{"VERSION": {Stdout: version010}, "INFO": {Stdout: inventory}}}}
	for range 3 {
		pools, err := d.Discover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(pools) != 1 || pools[0].Name != "tty-good" || len(pools[0].Devices) != 1 || pools[0].Devices[0].ID != "tty1" {
			t.Fatalf("pools %+v, want tty-good with tty1 alone", pools)
		}
		if skips := d.Skipped(); len(skips) != 1 || !strings.HasSuffix(skips[0].DropIn, "bad_.conf") {
			t.Errorf("skipped %+v, want bad_.conf's pool", skips)
		}
	}
	// Once per drop-in, not once per discovery.
	if n := strings.Count(log.String(), "devices refused"); n != 2 {
		t.Errorf("%d lines of devices refused over three discoveries of two drop-ins, want 2:\n%s", n, log.String())
	}
}

// Two drop-ins whose pools share a name (gen_x and gen-x both become
// tty-gen-x; generic.conf and generic.json both tty-generic) are both
// refused: served, the later one silently replaced the earlier.
func TestDiscoverRefusesClashingDropIns(t *testing.T) {
	confDir := t.TempDir()
	args := map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reserved": 40}
	writeConf(t, confDir, "tty", "gen_x", "generic-tty", args)
	writeConf(t, confDir, "tty", "gen-x", "generic-tty", args)
	writeConf(t, confDir, "tty", "gen.x", "generic-tty", args)
	writeConf(t, confDir, "tty", "other", "generic-tty", args)
	var log bytes.Buffer
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	for range 2 {
		pools, err := d.Discover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(pools) != 1 || pools[0].Name != "tty-other" {
			t.Fatalf("pools %v, want tty-other alone", names(pools))
		}
		if skips := d.Skipped(); len(skips) != 3 {
			t.Errorf("skipped %+v, want the three clashing drop-ins", skips)
		}
	}
	if n := strings.Count(log.String(), "map to one pool name"); n != 1 {
		t.Errorf("%d lines for the clash over two discoveries, want 1:\n%s", n, log.String())
	}
}

// blockingExec never returns from a run, whatever its context says: a
// discovery blocked where no context reaches (a hung mount).
type blockingExec struct{ started chan struct{} }

func (e blockingExec) ExecPlugin(context.Context, string, []byte, []string) (*invoke.Output, error) {
	close(e.started)
	select {}
}

// Run returns when its context ends even while a discovery is blocked,
// and publishes nothing after: the bridge's shutdown never waits on it.
func TestRunDoesNotWaitForABlockedDiscovery(t *testing.T) {
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", nil)
	started := make(chan struct{})
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Exec: blockingExec{started}}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		d.Run(ctx, time.Hour, time.Hour, func(Update) { t.Error("a blocked discovery published") })
		close(returned)
	}()
	<-started
	cancel()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits for a discovery blocked in a plugin run")
	}
}

// A discovery that outlives Deadline is logged as stuck, once, no other
// starts beside it, and Health says so.
func TestRunLogsAStuckDiscoveryOnce(t *testing.T) {
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", nil)
	var mu sync.Mutex
	var log bytes.Buffer
	started := make(chan struct{})
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Exec: blockingExec{started}, Deadline: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))}
	if err := d.Health(); err != nil {
		t.Errorf("Health before any discovery: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	go func() {
		<-started
		time.Sleep(100 * time.Millisecond)
		if err := d.Health(); !errors.Is(err, ErrStuck) {
			t.Errorf("Health of a discovery stuck for 100 ms, deadline 20 ms: %v", err)
		}
	}()
	d.Run(ctx, 10*time.Millisecond, time.Hour, func(Update) {}) // a second start would close started twice and panic
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(log.String(), "discovery stuck"); n != 1 {
		t.Errorf("%d stuck warnings, want 1:\n%s", n, log.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A drop-in with more devices than MaxDevices serves the first ones by
// id and refuses the rest, saying so.
func TestDiscoverCapsDevicesPerDropIn(t *testing.T) {
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "many", "generic-tty", nil)
	var devs []string
	for _, id := range []string{"tty5", "tty1", "tty4", "tty2", "tty3"} {
		devs = append(devs, `{"id":"`+id+`","resource":"tty","deviceNodes":[],"healthy":true,"capacity":1,"used":0,"shared":false}`)
	}
	inventory := `{"cdiVersion":"0.1.0","tty":5,"device_inventory":[` + strings.Join(devs, ",") + `]}`
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, MaxDevices: 3,
		Exec: &fakeexec.Exec{Replies: map[string]fakeexec.Reply{"VERSION": {Stdout: version010}, "INFO": {Stdout: inventory}}}}
	pools, err := d.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, dev := range pools[0].Devices {
		ids = append(ids, dev.ID)
	}
	if strings.Join(ids, ",") != "tty1,tty2,tty3" {
		t.Errorf("served %v, want tty1, tty2 and tty3", ids)
	}
	if skips := d.Skipped(); len(skips) != 1 || !strings.Contains(skips[0].Reason, "5 devices, more than the 3") {
		t.Errorf("skipped %+v, want the cap's refusal", skips)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// binDir holds the built cdi-bridge and every plugin side by side.
var binDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &binDir, ".", "github.com/cdiexec/cdi/plugins/generic-tty", "github.com/cdiexec/cdi/plugins/endpoint",
		"github.com/cdiexec/cdi/plugins/drm", "github.com/cdiexec/cdi/plugins/generic")
}

const (
	pool = "cdi.test/tty-generic"
	wait = 20 * time.Second
)

// bridge is a cdi-bridge process over the real generic-tty plugin (two
// terminals) and the kubelet-side fake.
type bridge struct {
	cmd     *exec.Cmd
	kubelet *kubelettest.Kubelet
	dpDir   string
	confDir string // --conf-dir
	cdiDir  string // --cdi-spec-dir
	// addr is the address --metrics-address bound, read from the log.
	addr chan string
	log  *logWatcher
}

func startBridge(t *testing.T) *bridge { return startBridgeOver(t, exectest.FixtureRoot(t)) }

// startBridgeOver is startBridge with the drop-in's root at root, which
// must hold two terminals above tty42.
func startBridgeOver(t *testing.T, root string) *bridge {
	confDir := t.TempDir()
	conf, _ := json.Marshal(map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": root, "stateDir": exectest.StateDir(t), "num_system_reserved": 42}})
	_ = os.MkdirAll(filepath.Join(confDir, "tty.d"), 0o755)
	if err := os.WriteFile(filepath.Join(confDir, "tty.d", "generic.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	dpDir, _ := os.MkdirTemp("", "br")
	t.Cleanup(func() { os.RemoveAll(dpDir) })
	k, err := kubelettest.Start(dpDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	b := &bridge{kubelet: k, dpDir: dpDir, confDir: confDir, cdiDir: t.TempDir(), addr: make(chan string, 1)}
	b.cmd = exec.Command(filepath.Join(binDir, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", binDir, "--node-name", "n1",
		"--device-plugin-dir", dpDir, "--domain", "cdi.test", "--local-store", filepath.Join(t.TempDir(), "i.json"),
		"--metrics-address", "127.0.0.1:0", "--cdi-spec-dir", b.cdiDir)
	b.log = &logWatcher{addr: b.addr}
	b.cmd.Stderr = b.log
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.cmd.Process.Kill() })
	if _, err := k.WaitFor(pool, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
	return b
}

// logWatcher copies the bridge's JSON log to our stderr and sends the
// address of the metrics listener once the log names it.
type logWatcher struct {
	addr    chan<- string
	pending []byte
	mu      sync.Mutex
	lines   []map[string]any
	raw     [][]byte // every line as written
}

// rawLines returns every line logged so far, as written.
func (w *logWatcher) rawLines() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.raw)
}

// records returns the log records so far whose msg is msg.
func (w *logWatcher) records(msg string) []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []map[string]any
	for _, l := range w.lines {
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

func (w *logWatcher) Write(p []byte) (int, error) {
	os.Stderr.Write(p)
	w.pending = append(w.pending, p...)
	for {
		line, rest, ok := bytes.Cut(w.pending, []byte("\n"))
		if !ok {
			return len(p), nil
		}
		w.pending = rest
		w.mu.Lock()
		w.raw = append(w.raw, bytes.Clone(line))
		w.mu.Unlock()
		var record map[string]any
		if json.Unmarshal(line, &record) == nil {
			w.mu.Lock()
			w.lines = append(w.lines, record)
			w.mu.Unlock()
		}
		var rec struct{ Msg, Address string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "serving metrics and health" {
			w.addr <- rec.Address
		}
	}
}

// The log answers an operator's questions without decoding: which device
// a call got, and durations as durations, not nanoseconds.
func TestLogIsReadable(t *testing.T) {
	b := startBridge(t)
	if _, err := b.kubelet.Allocate(context.Background(), pool, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	var allocated []map[string]any
	for deadline := time.Now().Add(wait); len(allocated) == 0; allocated = b.log.records("allocated") {
		if time.Now().After(deadline) {
			t.Fatal("no \"allocated\" line after a granted Allocate")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a := allocated[0]
	if a["resource"] != pool || a["resourceLevel"] != "configuration" || len(a["slots"].([]any)) != 1 || len(a["devices"].([]any)) != 1 {
		t.Errorf("allocated line %v, want the pool, its level, one slot and one device", a)
	}
	reclaim := b.log.records("slot reclaim")
	if len(reclaim) != 1 || reclaim[0]["grace"] != "5m0s" || reclaim[0]["period"] != "30s" {
		t.Errorf("slot reclaim lines %v, want one with grace 5m0s and period 30s", reclaim)
	}
}

// TestBinary runs the built cdi-bridge as a process: it must register
// its resources, and on SIGTERM end their streams, with no empty list
// (the next pod of a rolling update may serve them already), and exit 0.
func TestBinary(t *testing.T) {
	b := startBridge(t)
	if _, err := b.kubelet.WaitFor(pool, wait, func(n int, d []*pluginapi.Device) bool { return len(d) > 0 }); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if last, err := b.kubelet.WaitEnded(pool, wait); err != nil || len(last) == 0 {
		t.Fatalf("the stream of %s at SIGTERM: last list %v, %v; want it ended after the devices", pool, last, err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("cdi-bridge exited with %v", err)
	}
	if socks, _ := filepath.Glob(filepath.Join(b.dpDir, "cdi.test_*.sock")); len(socks) != 0 {
		t.Errorf("sockets left behind: %v", socks)
	}
}

// TestMetrics scrapes /metrics over HTTP before and after a granted and a
// denied Configuration-level Allocate through the kubelet fake: the
// counters and the ADD latency histogram must have moved by exactly those.
func TestMetrics(t *testing.T) {
	b := startBridge(t)
	var addr string
	select {
	case addr = <-b.addr:
	case <-time.After(wait):
		t.Fatal("the bridge never logged its metrics address")
	}
	// Ready once every device plugin has registered, which may come a
	// moment after the pool's list.
	for _, path := range []string{"/healthz", "/readyz"} {
		var status string
		for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				status = fmt.Sprintf("%s: %s", resp.Status, body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s = %s, %v", path, status, err)
			}
		}
	}
	allocated := series{"cdi_bridge_allocations_total", map[string]string{"resource": pool, "level": "configuration", "result": "ok"}}
	denied := series{"cdi_bridge_allocations_total", map[string]string{"resource": pool, "level": "configuration", "result": "denied"}}
	adds := series{"cdi_bridge_plugin_exec_duration_seconds", map[string]string{"plugin": "generic-tty", "command": "ADD", "result": "ok"}}
	infos := series{"cdi_bridge_plugin_exec_duration_seconds", map[string]string{"plugin": "generic-tty", "command": "INFO", "result": "ok"}}
	registered := series{"cdi_bridge_registrations_total", map[string]string{"resource": pool, "result": "ok"}}

	before := scrape(t, addr)
	if _, err := b.kubelet.Allocate(context.Background(), pool, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.kubelet.Allocate(context.Background(), pool, []string{"1", "2", "3"}); err == nil {
		t.Fatal("three distinct terminals out of two were granted")
	}
	after := scrape(t, addr)
	for _, c := range []struct {
		s     series
		delta float64
	}{{allocated, 1}, {denied, 1}, {adds, 1}} {
		if d := c.s.value(after) - c.s.value(before); d != c.delta {
			t.Errorf("%s moved by %v, want %v", c.s, d, c.delta)
		}
	}
	if infos.value(after) < 1 || registered.value(after) < 1 {
		t.Errorf("INFO runs %v, registrations %v; want at least one each", infos.value(after), registered.value(after))
	}
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if after[name] == nil {
			t.Errorf("no %s: the Go and process collectors are missing", name)
		}
	}
	// The granted call's slot reaches the pool's gauges once the store's
	// change is read back.
	used := series{"cdi_bridge_slots", map[string]string{"resource": pool, "state": "used"}}
	free := series{"cdi_bridge_slots", map[string]string{"resource": pool, "state": "free"}}
	healthy := series{"cdi_bridge_devices", map[string]string{"resource": pool, "health": "healthy"}}
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		now := scrape(t, addr)
		if used.value(now) == 1 && free.value(now) == 1 && healthy.value(now) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v = %v, %v = %v, %v = %v; want 1 of 2 slots used on 2 healthy terminals",
				used, used.value(now), free, free.value(now), healthy, healthy.value(now))
		}
	}
}

func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// series is one metric with its labels.
type series struct {
	name   string
	labels map[string]string
}

// value is a counter's value or a histogram's sample count; 0 when absent.
func (s series) String() string { return fmt.Sprintf("%s%v", s.name, s.labels) }

func (s series) value(fams map[string]*dto.MetricFamily) float64 {
	fam := fams[s.name]
	if fam == nil {
		return 0
	}
	for _, m := range fam.Metric {
		if !s.matches(m) {
			continue
		}
		if h := m.GetHistogram(); h != nil {
			return float64(h.GetSampleCount())
		}
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	return 0
}

func (s series) matches(m *dto.Metric) bool {
	n := 0
	for _, l := range m.Label {
		if v, ok := s.labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(s.labels)
}

// The binary watches its drop-ins' device directories: a terminal made
// under the drop-in's root is offered long before the minute of the
// discovery period, and the time from its event to the kubelet's list is
// in the histogram.
func TestDeviceEventMetric(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"tty43", "tty44"} {
		if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "dev", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := startBridgeOver(t, root)
	var addr string
	select {
	case addr = <-b.addr:
	case <-time.After(wait):
		t.Fatal("the bridge never logged its metrics address")
	}
	if err := os.WriteFile(filepath.Join(root, "dev", "tty45"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.kubelet.WaitFor(pool, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 3 }); err != nil {
		t.Fatalf("the terminal plugged in was not offered: %v", err)
	}
	events := series{"cdi_bridge_device_event_to_kubelet_seconds", nil}
	for deadline := time.Now().Add(wait); events.value(scrape(t, addr)) < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no device event in cdi_bridge_device_event_to_kubelet_seconds")
		}
	}
	if got := b.log.records("device appeared"); len(got) != 1 {
		t.Errorf("%d \"device appeared\" log lines, want 1: %v", len(got), got)
	}
}

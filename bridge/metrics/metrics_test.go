package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCounters(t *testing.T) {
	m := New("test")
	m.Allocation("cdi.test/tty", "configuration", "ok")
	m.Allocation("cdi.test/tty", "configuration", "ok")
	m.Allocation("cdi.test/tty", "configuration", "denied")
	m.Registration("cdi.test/tty", nil)
	m.Registration("cdi.test/tty", errors.New("kubelet away"))
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"ok", testutil.ToFloat64(m.allocations.WithLabelValues("cdi.test/tty", "configuration", "ok")), 2},
		{"denied", testutil.ToFloat64(m.allocations.WithLabelValues("cdi.test/tty", "configuration", "denied")), 1},
		{"failed", testutil.ToFloat64(m.allocations.WithLabelValues("cdi.test/tty", "configuration", "failed")), 0},
		{"registered", testutil.ToFloat64(m.registrations.WithLabelValues("cdi.test/tty", "ok")), 1},
		{"registration failed", testutil.ToFloat64(m.registrations.WithLabelValues("cdi.test/tty", "failed")), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
			}
		})
	}
}

// Each Metrics has its own registry: two of them share no counts.
func TestRegistriesAreSeparate(t *testing.T) {
	a, b := New("test"), New("test")
	a.Allocation("r", "instance", "ok")
	if n, err := testutil.GatherAndCount(b.Registry, "cdi_bridge_allocations_total"); err != nil || n != 0 {
		t.Errorf("the second registry holds %d allocation series (%v), want 0", n, err)
	}
}

func TestExecHistogram(t *testing.T) {
	m := New("test")
	m.Exec("generic-tty", "ADD", "ok", 3*time.Millisecond)
	m.Exec("generic-tty", "ADD", "ok", 20*time.Second)
	want := `
# HELP cdi_bridge_plugin_exec_duration_seconds Time each plugin run took, by plugin binary, command and result (ok: exit 0; error: an error document or a crash; failed: not run, or killed at its timeout).
# TYPE cdi_bridge_plugin_exec_duration_seconds histogram
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.001"} 0
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.0025"} 0
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.005"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.01"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.025"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.05"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.1"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.25"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="0.5"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="1"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="2.5"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="5"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="10"} 1
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="30"} 2
cdi_bridge_plugin_exec_duration_seconds_bucket{command="ADD",plugin="generic-tty",result="ok",le="+Inf"} 2
cdi_bridge_plugin_exec_duration_seconds_sum{command="ADD",plugin="generic-tty",result="ok"} 20.003
cdi_bridge_plugin_exec_duration_seconds_count{command="ADD",plugin="generic-tty",result="ok"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "cdi_bridge_plugin_exec_duration_seconds"); err != nil {
		t.Error(err)
	}
}

// The handler serves the bridge's metrics and the Go and process ones.
func TestHandler(t *testing.T) {
	m := New("test")
	m.Allocation("cdi.test/tty", "instance", "failed")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`cdi_bridge_allocations_total{level="instance",resource="cdi.test/tty",result="failed"} 1`,
		"go_goroutines ", "process_start_time_seconds ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func TestSkippedDropIns(t *testing.T) {
	m := New("test")
	n := 2
	m.SkippedDropIns(func() int { return n })
	const want = "# HELP cdi_bridge_dropins_skipped Drop-ins, or pools of one, that the last discovery did not serve (/readyz says which and why).\n" +
		"# TYPE cdi_bridge_dropins_skipped gauge\ncdi_bridge_dropins_skipped 2\n"
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "cdi_bridge_dropins_skipped"); err != nil {
		t.Error(err)
	}
}

func TestSkippedDevices(t *testing.T) {
	m := New("test")
	skipped := map[string]map[string]int{"/etc/cdi/dev.d/usb.conf": {"bad-path": 2, "outside-root": 1}, "/etc/cdi/tty.d/tty.conf": {"bad-id": 1}}
	m.SkippedDevices(func() map[string]map[string]int { return skipped })
	want := "# HELP cdi_bridge_devices_skipped Devices each drop-in's plugin found but did not offer at its last INFO, by the reason it gave (the debug log has the plugin's line for each).\n" +
		"# TYPE cdi_bridge_devices_skipped gauge\n" +
		"cdi_bridge_devices_skipped{drop_in=\"/etc/cdi/dev.d/usb.conf\",reason=\"bad-path\"} 2\n" +
		"cdi_bridge_devices_skipped{drop_in=\"/etc/cdi/dev.d/usb.conf\",reason=\"outside-root\"} 1\n" +
		"cdi_bridge_devices_skipped{drop_in=\"/etc/cdi/tty.d/tty.conf\",reason=\"bad-id\"} 1\n"
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "cdi_bridge_devices_skipped"); err != nil {
		t.Error(err)
	}
	// A drop-in whose plugin skips nothing any more has no series.
	skipped = map[string]map[string]int{"/etc/cdi/tty.d/tty.conf": {"bad-id": 1}}
	if n, err := testutil.GatherAndCount(m.Registry, "cdi_bridge_devices_skipped"); err != nil || n != 1 {
		t.Errorf("%d series (%v), want 1", n, err)
	}
}

func TestBuildInfo(t *testing.T) {
	m := New("v1.2.3")
	const want = "# HELP cdi_bridge_build_info Always 1; the version label is the running build.\n" +
		"# TYPE cdi_bridge_build_info gauge\ncdi_bridge_build_info{version=\"v1.2.3\"} 1\n"
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "cdi_bridge_build_info"); err != nil {
		t.Error(err)
	}
}

func TestDeviceEventHistogram(t *testing.T) {
	tests := []struct {
		name  string
		took  []time.Duration
		count int
		// underSecond is how many of them are in the le="1" bucket.
		underSecond int
	}{
		{"none", nil, 0, 0},
		{"fast and one at the period", []time.Duration{120 * time.Millisecond, 300 * time.Millisecond, 59 * time.Second}, 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := New("test")
			for _, d := range tc.took {
				m.DeviceEvent(d)
			}
			if got := testutil.CollectAndCount(m.deviceEvents); got != 1 {
				t.Fatalf("%d series, want 1", got)
			}
			families, err := m.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range families {
				if f.GetName() != "cdi_bridge_device_event_to_kubelet_seconds" {
					continue
				}
				h := f.GetMetric()[0].GetHistogram()
				if int(h.GetSampleCount()) != tc.count {
					t.Errorf("count %d, want %d", h.GetSampleCount(), tc.count)
				}
				for _, b := range h.GetBucket() {
					if b.GetUpperBound() == 1 && int(b.GetCumulativeCount()) != tc.underSecond {
						t.Errorf("under a second: %d, want %d", b.GetCumulativeCount(), tc.underSecond)
					}
				}
				return
			}
			t.Error("cdi_bridge_device_event_to_kubelet_seconds is not gathered")
		})
	}
}

package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A prepare and an unprepare are timed by pool, a failure counted by
// pool and reason, and /metrics serves them; with DRA off there are no
// series.
func TestDRAClaims(t *testing.T) {
	m := New("test")
	if n, err := testutil.GatherAndCount(m.Registry, "cdi_bridge_dra_prepare_duration_seconds", "cdi_bridge_dra_prepare_failures_total"); err != nil || n != 0 {
		t.Fatalf("%d DRA series before any claim (%v), want none", n, err)
	}
	m.DRAClaim("prepare", "tty-generic", "", 20*time.Millisecond)
	m.DRAClaim("prepare", "tty-generic", "plugin-code-10", 40*time.Millisecond)
	m.DRAClaim("unprepare", "gpu-drm", "", 3*time.Millisecond)
	if got := testutil.ToFloat64(m.dra.prepareFailures.WithLabelValues("tty-generic", "plugin-code-10")); got != 1 {
		t.Errorf("prepare failures %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.dra.unprepareFailures); n != 0 {
		t.Errorf("%d unprepare failure series, want none", n)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`cdi_bridge_dra_prepare_duration_seconds_count{pool="tty-generic"} 2`,
		`cdi_bridge_dra_prepare_duration_seconds_bucket{pool="tty-generic",le="0.025"} 1`,
		`cdi_bridge_dra_unprepare_duration_seconds_count{pool="gpu-drm"} 1`,
		`cdi_bridge_dra_prepare_failures_total{pool="tty-generic",reason="plugin-code-10"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func TestDRAPools(t *testing.T) {
	m := New("test")
	pools := []DRAPool{{Pool: "tty-generic", Published: 4, Tainted: 1}}
	m.DRAPools(func() []DRAPool { return pools })
	want := "# HELP cdi_bridge_dra_devices Devices of each DRA pool in this node's ResourceSlices, by state: published (all of them), tainted (those tainted unhealthy, which the scheduler allocates to no claim that does not tolerate it).\n" +
		"# TYPE cdi_bridge_dra_devices gauge\n" +
		"cdi_bridge_dra_devices{pool=\"tty-generic\",state=\"published\"} 4\n" +
		"cdi_bridge_dra_devices{pool=\"tty-generic\",state=\"tainted\"} 1\n"
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "cdi_bridge_dra_devices"); err != nil {
		t.Error(err)
	}
}

package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// draMetrics are the DRA front end's prepare and unprepare histograms and
// failure counters. With DRA off they have no series.
type draMetrics struct {
	prepare, unprepare                 *prometheus.HistogramVec
	prepareFailures, unprepareFailures *prometheus.CounterVec
}

func newDRAMetrics() *draMetrics {
	hist := func(op string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "dra_" + op + "_duration_seconds",
			Help:    "Time the DRA front end took to " + op + " a claim (its ADDs or DELs, its CDI spec and checkpoint), by the bridge pool of the claim's devices (a claim of two pools counts in both; unknown: not this node's, or not recorded), failed calls included.",
			Buckets: execBuckets(),
		}, []string{"pool"})
	}
	failures := func(op string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "dra_" + op + "_failures_total",
			Help: "Claims the DRA front end failed to " + op + " (the kubelet tries again), by pool and reason (not-discovered, not-allocatable, plugin-timeout, plugin-not-run, plugin-bad-output, plugin-code-<n>, file-system, canceled, other).",
		}, []string{"pool", "reason"})
	}
	return &draMetrics{prepare: hist("prepare"), unprepare: hist("unprepare"),
		prepareFailures: failures("prepare"), unprepareFailures: failures("unprepare")}
}

func (d *draMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{d.prepare, d.unprepare, d.prepareFailures, d.unprepareFailures}
}

// DRAClaim records one Prepare or Unprepare (op "prepare" or "unprepare",
// dradevices.Observed) of a claim of pool: how long it took and, unless
// reason is "", that it failed and why.
func (m *Metrics) DRAClaim(op, pool, reason string, took time.Duration) {
	hist, failures := m.dra.prepare, m.dra.prepareFailures
	if op == "unprepare" {
		hist, failures = m.dra.unprepare, m.dra.unprepareFailures
	}
	hist.WithLabelValues(pool).Observe(took.Seconds())
	if reason != "" {
		failures.WithLabelValues(pool, reason).Inc()
	}
}

// DRAPool is one of the node's DRA pools as last published.
type DRAPool struct {
	// Pool is the bridge's pool, e.g. "gpu-drm".
	Pool string
	// Published counts its devices in the node's ResourceSlices, Tainted
	// those of them tainted unhealthy.
	Published, Tainted int
}

// DRAPools exports pools, read at each scrape, as
// cdi_bridge_dra_devices{pool,state}: published (every device in the
// node's slices) and tainted (those of them tainted unhealthy).
func (m *Metrics) DRAPools(pools func() []DRAPool) {
	m.Registry.MustRegister(draPoolCollector{pools: pools, desc: prometheus.NewDesc(namespace+"_dra_devices",
		"Devices of each DRA pool in this node's ResourceSlices, by state: published (all of them), tainted (those tainted unhealthy, which the scheduler allocates to no claim that does not tolerate it).",
		[]string{"pool", "state"}, nil)})
}

type draPoolCollector struct {
	pools func() []DRAPool
	desc  *prometheus.Desc
}

func (c draPoolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c draPoolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.pools() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(p.Published), p.Pool, "published")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(p.Tainted), p.Pool, "tainted")
	}
}

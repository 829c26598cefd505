package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "cdi_bridge"

// execBuckets are the plugin run latency buckets, in seconds: a plugin
// answers INFO in milliseconds, and ADD is bounded by the exec timeout
// (30 s by default).
func execBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// eventBuckets are the device event latency buckets, in seconds: the
// debounce (100 ms by default) and an INFO make most of it, the target is
// a second, and the discovery period (a minute) is where a missed event
// ends up.
func eventBuckets() []float64 {
	return []float64{.05, .1, .15, .2, .3, .5, .75, 1, 2, 5, 15, 60}
}

// Metrics is the bridge's collectors and the registry they are on.
type Metrics struct {
	Registry      *prometheus.Registry
	allocations   *prometheus.CounterVec
	exec          *prometheus.HistogramVec
	registrations *prometheus.CounterVec
	deviceEvents  prometheus.Histogram
	setAside      *prometheus.CounterVec
	dra           *draMetrics
}

// New returns the collectors registered on a fresh registry, with
// cdi_bridge_build_info{version} set to 1 for this build.
func New(version string) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "allocations_total",
			Help: "Allocate calls by resource, level (instance, configuration) and result (ok, denied, failed).",
		}, []string{"resource", "level", "result"}),
		exec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "plugin_exec_duration_seconds",
			Help:    "Time each plugin run took, by plugin binary, command and result (ok: exit 0; error: an error document or a crash; failed: not run, or killed at its timeout).",
			Buckets: execBuckets(),
		}, []string{"plugin", "command", "result"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "registrations_total",
			Help: "Device plugin registrations with the kubelet, by resource and result (ok, failed).",
		}, []string{"resource", "result"}),
		deviceEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "device_event_to_kubelet_seconds",
			Help:    "Time from a device directory event (a device node appeared or vanished) until the kubelet was sent each device list it changed.",
			Buckets: eventBuckets(),
		}),
		setAside: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "dra_checkpoint_set_aside_total",
			Help: "DRA checkpoints moved aside at start, by reason (unreadable, previous-boot): the prepared claims were rebuilt from the API server and the plugins.",
		}, []string{"reason"}),
		dra: newDRAMetrics(),
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info", Help: "Always 1; the version label is the running build.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	buildInfo.Set(1)
	m.Registry.MustRegister(m.allocations, m.exec, m.registrations, m.deviceEvents, m.setAside, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Registry.MustRegister(m.dra.collectors()...)
	return m
}

// Allocation counts one Allocate call.
func (m *Metrics) Allocation(resource, level, result string) {
	m.allocations.WithLabelValues(resource, level, result).Inc()
}

// Exec records one plugin run.
func (m *Metrics) Exec(plugin, command, result string, took time.Duration) {
	m.exec.WithLabelValues(plugin, command, result).Observe(took.Seconds())
}

// Registration counts one registration attempt; err is its outcome.
func (m *Metrics) Registration(resource string, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.registrations.WithLabelValues(resource, result).Inc()
}

// DeviceEvent records the time from a device event until a list it
// changed reached the kubelet.
func (m *Metrics) DeviceEvent(took time.Duration) {
	m.deviceEvents.Observe(took.Seconds())
}

// DRACheckpointSetAside counts a DRA checkpoint moved aside, by reason.
func (m *Metrics) DRACheckpointSetAside(reason string) {
	m.setAside.WithLabelValues(reason).Inc()
}

// SkippedDropIns exports count, how many drop-ins (or pools of one) the
// last discovery did not serve, as cdi_bridge_dropins_skipped.
func (m *Metrics) SkippedDropIns(count func() int) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "dropins_skipped",
		Help: "Drop-ins, or pools of one, that the last discovery did not serve (/readyz says which and why).",
	}, func() float64 { return float64(count()) }))
}

// StoreStale exports since, when the instance store's view may be behind
// the API server (zero when it is current), as
// cdi_bridge_store_stale_seconds.
func (m *Metrics) StoreStale(since func() time.Time) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "store_stale_seconds",
		Help: "How long the Instance store's view has been behind the API server (its watch lost, no list answered); 0 when current.",
	}, func() float64 {
		if t := since(); !t.IsZero() {
			return time.Since(t).Seconds()
		}
		return 0
	}))
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

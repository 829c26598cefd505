package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// SkippedDevices exports skipped, read at each scrape, as
// cdi_bridge_devices_skipped{drop_in, reason}: per drop-in file, the
// devices its plugin found but did not offer at its last INFO, by the
// reason the plugin gave (SPEC.md's skipped_devices). The reasons are few
// and bounded by SPEC.md, so the series stay a handful per drop-in.
func (m *Metrics) SkippedDevices(skipped func() map[string]map[string]int) {
	m.Registry.MustRegister(skippedCollector{skipped: skipped,
		desc: prometheus.NewDesc(namespace+"_devices_skipped",
			"Devices each drop-in's plugin found but did not offer at its last INFO, by the reason it gave (the debug log has the plugin's line for each).",
			[]string{"drop_in", "reason"}, nil),
	})
}

// skippedCollector reads the skipped devices at each scrape.
type skippedCollector struct {
	skipped func() map[string]map[string]int
	desc    *prometheus.Desc
}

func (c skippedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c skippedCollector) Collect(ch chan<- prometheus.Metric) {
	byDropIn := c.skipped()
	dropIns := make([]string, 0, len(byDropIn))
	for d := range byDropIn {
		dropIns = append(dropIns, d)
	}
	sort.Strings(dropIns)
	for _, d := range dropIns {
		for reason, n := range byDropIn[d] {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), d, reason)
		}
	}
}

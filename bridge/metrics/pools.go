package metrics

import "github.com/prometheus/client_golang/prometheus"

// PoolUsage is one pool as this node sees it.
type PoolUsage struct {
	// Resource is the pool's Configuration-level resource.
	Resource string
	// Devices and Healthy count the pool's devices on this node.
	Devices, Healthy int
	// Slots counts the slots of the pool's Instances; Used those held by
	// anyone (this node or another, for a shared device).
	Slots, Used int
}

// Pools exports usage, read at each scrape, as cdi_bridge_devices
// {resource, health} and cdi_bridge_slots{resource, state}: per pool, not
// per device, so that a node of thousands of devices stays a few series.
func (m *Metrics) Pools(usage func() []PoolUsage) {
	m.Registry.MustRegister(poolCollector{usage: usage,
		devices: prometheus.NewDesc(namespace+"_devices",
			"Devices of each pool on this node, by health (healthy, unhealthy).", []string{"resource", "health"}, nil),
		slots: prometheus.NewDesc(namespace+"_slots",
			"Usage slots of each pool's devices, by state (used: held by this or another node; free).", []string{"resource", "state"}, nil),
	})
}

// poolCollector reads the pools at each scrape.
type poolCollector struct {
	usage          func() []PoolUsage
	devices, slots *prometheus.Desc
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.devices
	ch <- c.slots
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.usage() {
		ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(p.Healthy), p.Resource, "healthy")
		ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(p.Devices-p.Healthy), p.Resource, "unhealthy")
		ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(p.Used), p.Resource, "used")
		ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(p.Slots-p.Used), p.Resource, "free")
	}
}

package dra

import (
	"context"
	"sync"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Health is a device's health as the kubelet is told it.
type Health string

// The healths of a device; the zero Health is Unknown.
const (
	Healthy   Health = "Healthy"
	Unhealthy Health = "Unhealthy"
	// Unknown: the bridge cannot tell (the plugin's INFO failed).
	Unknown Health = "Unknown"
)

// DeviceHealth is one device's health as the kubelet is told it. Pool
// and Name are the device's as Prepare names it, which is how the
// kubelet finds the pods that hold it.
type DeviceHealth struct {
	Pool, Name string
	Health     Health
	// Message says why a device is not healthy; the kubelet shows it in
	// the pod's status.
	Message string
	// Checked is when the bridge determined it: the discovery that
	// found it so.
	Checked time.Time
}

// Health timing. The kubelet shows a device's health as Unknown when no
// report has named it for its HealthTimeout (the kubelet's default,
// 30 s, sent with every device); the driver sends the complete list
// every HealthResend, and at once when it changes, so that a device
// stays known for as long as the bridge runs. A bridge that stops ends
// the stream, and the kubelet forgets the driver's health at once.
const (
	HealthTimeout = 30 * time.Second
	HealthResend  = 10 * time.Second
)

// healthFeed is the newest complete list of the driver's devices'
// health, which each of the kubelet's health streams sends.
type healthFeed struct {
	mu      sync.Mutex
	devices []DeviceHealth // nil before the first report
	changed chan struct{}  // closed, and replaced, by each report
}

func newHealthFeed() *healthFeed { return &healthFeed{changed: make(chan struct{})} }

// set makes devices the newest list and wakes the streams.
func (h *healthFeed) set(devices []DeviceHealth) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devices = append(make([]DeviceHealth, 0, len(devices)), devices...)
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *healthFeed) get() ([]DeviceHealth, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.devices, h.changed
}

// watch sends the newest list on reports, once there is one, then again
// whenever it changes and every resend, until ctx ends.
func (h *healthFeed) watch(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport, resend time.Duration) error {
	tick := time.NewTicker(resend)
	defer tick.Stop()
	for {
		devices, changed := h.get()
		if devices != nil {
			select {
			case <-ctx.Done():
				return nil
			case reports <- healthReport(devices):
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// healthReport is devices as the library's report, each with
// HealthTimeout.
func healthReport(devices []DeviceHealth) kubeletplugin.DeviceHealthReport {
	out := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(devices))}
	for _, d := range devices {
		h := kubeletplugin.HealthStatusUnknown
		switch d.Health {
		case Healthy:
			h = kubeletplugin.HealthStatusHealthy
		case Unhealthy:
			h = kubeletplugin.HealthStatusUnhealthy
		}
		out.Devices = append(out.Devices, kubeletplugin.DeviceHealth{PoolName: d.Pool, DeviceName: d.Name, Health: h,
			LastUpdated: d.Checked, HealthCheckTimeout: HealthTimeout, Message: d.Message})
	}
	return out
}

package bench

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// draPool is the one bridge pool of the DRA measurement.
const draPool = "accel-pci"

// draChanged is the index of the device the republishes change: in the
// first slice, so that a change which moves the devices after it moves
// those of every slice.
const draChanged = 100

// draDiscovery is a discovery of n PCI accelerators in one pool, as a
// plugin for such cards would report them: each with a PCI address for
// id, a NUMA node (the first half 0, the rest 1), vendor properties, and
// every fourth device with capacity 4 (consumable capacity in DRA).
func draDiscovery(n int) []discovery.Pool {
	conf := &invoke.Conf{Path: "/etc/cdi/accel.d/pci.conf",
		Config: spec.Config{Type: "accel", Args: []byte(`{"cdiKind":"example.com/accel"}`)}}
	devices := make([]spec.DeviceInfo, n)
	for i := range devices {
		addr := fmt.Sprintf("0000:%02x:%02x.%d", 1+i/64, i/8%8, i%8)
		numa := 2 * i / n
		capacity := 1
		if i%4 == 3 {
			capacity = 4
		}
		devices[i] = spec.DeviceInfo{ID: addr, Resource: "accel", NUMANode: &numa, Healthy: true, Capacity: capacity,
			DeviceNodes: []spec.DeviceNode{{HostPath: fmt.Sprintf("/dev/accel/accel%d", i)}},
			Properties: map[string]string{
				"pciAddress": addr, "vendor": "0x10de", "device": "0x2330", "driver": "nvidia",
				"serial": fmt.Sprintf("1654922%06d", i), "firmware": "96.00.5e.00.01", "iommuGroup": fmt.Sprint(40 + i),
			}}
	}
	return []discovery.Pool{{Name: draPool, Resource: "accel", Conf: conf, Devices: devices}}
}

// withDevice is pools with the device at index i of the first pool
// changed by change; pools itself is left as it was.
func withDevice(pools []discovery.Pool, i int, change func(*spec.DeviceInfo)) []discovery.Pool {
	out := slices.Clone(pools)
	out[0].Devices = slices.Clone(out[0].Devices)
	d := out[0].Devices[i]
	d.Properties = maps.Clone(d.Properties)
	change(&d)
	out[0].Devices[i] = d
	return out
}

// newFirmware is a property change: the device's firmware was updated.
func newFirmware(d *spec.DeviceInfo) { d.Properties["firmware"] = "96.00.89.00.01" }

// unhealthy is a health change: the device leaves its slice.
func unhealthy(d *spec.DeviceInfo) { d.Healthy = false }

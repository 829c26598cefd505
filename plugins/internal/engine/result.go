package engine

import (
	"slices"
	"sort"

	"github.com/cdiexec/cdi/spec"
)

// buildResult assembles the full (0.1.0) ADD result for the picked devices,
// units[i] being the slot taken on picked[i].
func buildResult(picked []*Device, units []spec.Unit, cdiKind string) *spec.AddResult {
	r := &spec.AddResult{Devices: []string{}, Units: units}
	for _, d := range picked {
		for _, n := range nodesFor(d) {
			if !slices.Contains(r.Devices, n.HostPath) {
				r.Devices = append(r.Devices, n.HostPath)
				r.DeviceNodes = append(r.DeviceNodes, n)
			}
		}
		if d.NUMANode != nil && !slices.Contains(r.NUMALocality, *d.NUMANode) {
			r.NUMALocality = append(r.NUMALocality, *d.NUMANode)
		}
		r.Env = spec.JoinValues(r.Env, d.Env)
		r.Annotations = spec.JoinValues(r.Annotations, d.Annotations)
		r.Mounts = spec.AppendMounts(r.Mounts, d.Mounts)
		r.CDIDevices = append(r.CDIDevices, cdiKind+"="+d.ID)
	}
	sort.Ints(r.NUMALocality)
	return r
}

// nodesFor is a device's nodes with their defaults filled in.
func nodesFor(d *Device) []spec.DeviceNode {
	out := make([]spec.DeviceNode, len(d.Nodes))
	for i, n := range d.Nodes {
		out[i] = n.WithDefaults()
	}
	return out
}

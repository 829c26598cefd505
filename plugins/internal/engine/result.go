package engine

import (
	"slices"
	"sort"
	"strings"

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
		r.Env = mergeJoined(r.Env, d.Env)
		r.Annotations = mergeJoined(r.Annotations, d.Annotations)
		r.Mounts = appendMounts(r.Mounts, d.Mounts)
		r.CDIDevices = append(r.CDIDevices, cdiKind+"="+d.ID)
	}
	sort.Ints(r.NUMALocality)
	return r
}

// nodesFor fills in the defaults of a device's nodes: the container path
// is the host path and access is read-write.
func nodesFor(d *Device) []spec.DeviceNode {
	out := make([]spec.DeviceNode, len(d.Nodes))
	for i, n := range d.Nodes {
		if n.ContainerPath == "" {
			n.ContainerPath = n.HostPath
		}
		if n.Permissions == "" {
			n.Permissions = "rw"
		}
		out[i] = n
	}
	return out
}

// mergeJoined adds src to dst. A key that several devices set gets their
// distinct values joined by commas in allocation order, the convention
// device plugins use for lists such as visible-device variables.
func mergeJoined(dst, src map[string]string) map[string]string {
	for k, v := range src {
		if dst == nil {
			dst = map[string]string{}
		}
		switch old, ok := dst[k]; {
		case !ok:
			dst[k] = v
		case !slices.Contains(strings.Split(old, ","), v):
			dst[k] = old + "," + v
		}
	}
	return dst
}

// appendMounts adds mounts whose container path is not taken yet.
func appendMounts(dst, src []spec.Mount) []spec.Mount {
	for _, m := range src {
		if !slices.ContainsFunc(dst, func(x spec.Mount) bool { return x.ContainerPath == m.ContainerPath }) {
			dst = append(dst, m)
		}
	}
	return dst
}

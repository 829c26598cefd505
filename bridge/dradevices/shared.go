package dradevices

import (
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/spec"
)

// SharedPoolName is the DRA pool of the shared devices of the bridge's
// pool, one for the whole cluster. It is the pool's name alone: a
// node-local DRA pool (PoolName) always holds one '/', which neither a
// node's nor a pool's name does, so the two never meet.
func SharedPoolName(pool string) string { return pool }

// SharedResources is what the elected bridge publishes for the shared
// devices of pools, the pools served through DRA as its own discovery
// describes them: per pool, one DRA pool (SharedPoolName) of the pool's
// shared Instances that at least one node sees, each device selecting
// those nodes (NodesSelector, with the kubernetes.io/hostname label
// hostname gives of each node). Published once for the cluster, a device's
// consumable capacity is counted once, as its Instance's slots are for
// the device plugins.
//
// The nodes are selected per device (PerDeviceNodeSelection), not with a
// selector of the pool: the cameras of one drop-in may be reachable from
// different nodes, and a pool-level selector would offer every camera on
// every node that sees any of them. A device no node sees is left out,
// since a device's node selector cannot be empty; a pool with none is not
// published, which deletes its slices.
//
// A device is described as Device describes a node's: its resource and
// CDI kind from the pool (every device of a pool has the pool's
// resource-spec), its id, capacity and properties from its Instance. It
// has no NUMA node: a device every node reaches is on none of them.
func SharedResources(pools []discovery.Pool, instances []instance.Instance, hostname func(node string) string) resourceslice.DriverResources {
	byPool := map[string][]instance.Instance{}
	for _, in := range instances {
		if in.Shared && len(in.Nodes) > 0 {
			byPool[in.Config] = append(byPool[in.Config], in)
		}
	}
	out := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	for _, p := range pools {
		shared := byPool[p.Name]
		if len(shared) == 0 {
			continue
		}
		sort.Slice(shared, func(i, j int) bool { return shared[i].DeviceID < shared[j].DeviceID })
		devices := make([]resourceapi.Device, 0, len(shared))
		for _, in := range shared {
			devices = append(devices, sharedDevice(p, in, hostname))
		}
		parts := chunk(devices)
		for i := range parts {
			parts[i].PerDeviceNodeSelection = ptr.To(true)
		}
		out.Pools[SharedPoolName(p.Name)] = resourceslice.Pool{Slices: parts}
	}
	return out
}

// sharedDevice is Instance in of pool p as a DRA device that selects the
// nodes that see it, by their hostname labels.
func sharedDevice(p discovery.Pool, in instance.Instance, hostname func(node string) string) resourceapi.Device {
	dev := Device(p, spec.DeviceInfo{ID: in.DeviceID, Resource: p.Resource, Shared: true, Healthy: true,
		Capacity: in.Capacity, Properties: in.Properties})
	hostnames := make([]string, 0, len(in.Nodes))
	for _, n := range in.Nodes {
		hostnames = append(hostnames, hostname(n))
	}
	dev.NodeSelector = NodesSelector(hostnames)
	return dev
}

// NodesSelector selects the nodes of the kubernetes.io/hostname label
// values given: one term, of one label requirement. Not the Node names,
// which would select exactly: a field selector takes one value only (the
// API refuses metadata.name In [a, b]), and the scheduler takes a
// device's selector of one term only (it cannot merge ORed terms into
// the allocation's), so that a device of two nodes cannot be selected by
// their names. hostnames must not be empty.
func NodesSelector(hostnames []string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: slices.Compact(slices.Sorted(slices.Values(hostnames))),
		}},
	}}}
}

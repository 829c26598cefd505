package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
)

// Device is one device of a pool that a node sees now.
type Device struct {
	// Key is the device's Instance name (instance.Name): the same for
	// every node that sees a shared device, one per node for a local one.
	Key      string
	Pool, ID string
	Shared   bool
	// Node is the one node that sees a local device; empty for a shared
	// one.
	Node       string
	Capacity   int
	Properties map[string]string
}

// Instances is what the controller reads of the Instance store: the
// elected bridge's store of every pool (elected.Store has it).
type Instances interface {
	List(ctx context.Context) ([]instance.Instance, error)
}

// Allocatable says how many of resource node's kubelet can hand out (the
// Node's status.allocatable), and whether it reports the resource at
// all.
type Allocatable func(node, resource string) (n int64, known bool)

// fromInstances is the devices of the Instances that some node sees, by
// pool. An Instance no node sees is a device gone (the janitor deletes
// it later): its workloads go after the Broker's grace. So is one that
// every node that sees it reports none of as allocatable, by its
// Instance-level resource (<domain>/<Instance name>): a bridge keeps a
// device that vanished, unhealthy, while a container holds it, and its
// Instance names the node until then, so that the pods of a Deployment
// holding a camera that is gone would otherwise keep it, and their
// Deployment, for ever. A node that does not report the resource (a pool
// too big for Instance-level resources, a plugin not registered yet)
// proves nothing.
func fromInstances(all []instance.Instance, domain string, allocatable Allocatable) map[string][]Device {
	out := map[string][]Device{}
	for _, in := range all {
		if len(in.Nodes) == 0 || unhealthyEverywhere(in, domain, allocatable) {
			continue
		}
		d := Device{Key: in.Name, Pool: in.Config, ID: in.DeviceID, Shared: in.Shared, Capacity: in.Capacity, Properties: in.Properties}
		if !in.Shared {
			d.Node = in.Nodes[0]
		}
		out[in.Config] = append(out[in.Config], d)
	}
	for _, ds := range out {
		sortDevices(ds)
	}
	return out
}

// unhealthyEverywhere reports whether every node that sees in reports
// its Instance-level resource, none of it allocatable.
func unhealthyEverywhere(in instance.Instance, domain string, allocatable Allocatable) bool {
	if allocatable == nil {
		return false
	}
	for _, node := range in.Nodes {
		if n, known := allocatable(node, domain+"/"+in.Name); !known || n > 0 {
			return false
		}
	}
	return true
}

// Attributes of the published devices that are not properties.
var notProperties = map[string]bool{
	dradevices.AttrID: true, dradevices.AttrResource: true, dradevices.AttrPool: true,
	dradevices.AttrNUMANode: true, dradevices.AttrCDIKind: true,
}

// fromSlices is the devices of the pools served through DRA (dra, by
// the bridge's pool name) in the ResourceSlices of driver, by pool:
// there, not in the Instances, is where a node's own DRA devices are
// recorded. A device is there while a node's bridge publishes it, which
// it does while it is healthy. Of a DRA pool only the slices of its
// newest generation count: older ones are on their way out.
func fromSlices(slices []*resourceapi.ResourceSlice, driver string, dra map[string]bool) map[string][]Device {
	newest := newestGenerations(slices, driver)
	out := map[string][]Device{}
	seen := map[string]bool{}
	for _, s := range slices {
		if s.Spec.Driver != driver || s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		node := ""
		if s.Spec.NodeName != nil {
			node = *s.Spec.NodeName
		}
		for _, dev := range s.Spec.Devices {
			d, ok := sliceDevice(dev, driver, node)
			if !ok || !dra[d.Pool] || seen[d.Key] {
				continue
			}
			seen[d.Key] = true
			out[d.Pool] = append(out[d.Pool], d)
		}
	}
	for _, ds := range out {
		sortDevices(ds)
	}
	return out
}

// sliceDevice reads one published device of node ("" for a shared one);
// false for one without the bridge's pool and id attributes.
func sliceDevice(dev resourceapi.Device, driver, node string) (Device, bool) {
	attr := func(name string) (string, bool) {
		for _, key := range []resourceapi.QualifiedName{resourceapi.QualifiedName(name), resourceapi.QualifiedName(driver + "/" + name)} {
			if a, ok := dev.Attributes[key]; ok && a.StringValue != nil {
				return *a.StringValue, true
			}
		}
		return "", false
	}
	pool, okPool := attr(dradevices.AttrPool)
	id, okID := attr(dradevices.AttrID)
	if !okPool || !okID {
		return Device{}, false
	}
	d := Device{Pool: pool, ID: id, Shared: node == "", Node: node, Capacity: 1, Properties: map[string]string{}}
	d.Key = instance.Name(pool, id, node, d.Shared)
	if c, ok := dev.Capacity[dradevices.CapacitySlots]; ok {
		d.Capacity = int(c.Value.Value())
	}
	for name, a := range dev.Attributes {
		short := strings.TrimPrefix(string(name), driver+"/")
		if a.StringValue != nil && !notProperties[short] && !strings.Contains(short, "/") {
			d.Properties[short] = *a.StringValue
		}
	}
	return d, true
}

func sortDevices(ds []Device) {
	slices.SortFunc(ds, func(a, b Device) int { return strings.Compare(a.Key, b.Key) })
}

// selects reports whether s picks d; a nil Selector picks every device.
func (s *Selector) selects(d Device) bool {
	if s == nil {
		return true
	}
	if len(s.DeviceIDs) > 0 && !slices.Contains(s.DeviceIDs, d.ID) {
		return false
	}
	for k, v := range s.Properties {
		if got, ok := d.Properties[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// fingerprint is a hash of what of a pool's devices shapes its Brokers'
// workloads, so that a change of anything else (a slot claimed,
// which the store reports as a change) wakes no Broker.
func fingerprint(ds []Device) string {
	type shape struct {
		Key, ID, Node string
		Capacity      int
		Properties    map[string]string
	}
	shapes := make([]shape, 0, len(ds))
	for _, d := range ds {
		shapes = append(shapes, shape{d.Key, d.ID, d.Node, d.Capacity, d.Properties})
	}
	data, _ := json.Marshal(shapes) // maps marshal in key order
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// changedPools are the pools whose fingerprints differ between before
// and now, either way.
func changedPools(before, now map[string]string) []string {
	var out []string
	for pool, fp := range now {
		if before[pool] != fp {
			out = append(out, pool)
		}
	}
	for pool := range before {
		if _, ok := now[pool]; !ok {
			out = append(out, pool)
		}
	}
	slices.Sort(out)
	return out
}

// fingerprints is fingerprint of each pool.
func fingerprints(byPool map[string][]Device) map[string]string {
	out := make(map[string]string, len(byPool))
	for _, pool := range slices.Sorted(maps.Keys(byPool)) {
		out[pool] = fingerprint(byPool[pool])
	}
	return out
}

// newestGenerations is the newest generation of each of driver's DRA
// pools (the slices' pool names) among slices.
func newestGenerations(slices []*resourceapi.ResourceSlice, driver string) map[string]int64 {
	newest := map[string]int64{}
	for _, s := range slices {
		if s.Spec.Driver == driver {
			newest[s.Spec.Pool.Name] = max(newest[s.Spec.Pool.Name], s.Spec.Pool.Generation)
		}
	}
	return newest
}

package node

import (
	"sort"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/deviceplugin"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/bridge/pool"
	"github.com/cdiexec/cdi/spec"
)

// view is what a handler needs of one pool. Views are built whenever
// the pools or the store's Instances change (rebuildViews) and never
// changed after: a handler reads one with a map lookup under the Node's
// lock, where building it would take a pass over every instance of the
// pool, for every stream, on every change.
type view struct {
	pool      discovery.Pool
	instances []instance.Instance // of the pool, sorted by name
	index     map[string]int      // instance name -> index in instances
	devices   map[string]spec.DeviceInfo
	cdiNamed  map[string]bool // device ids a CDI spec file names
	kind      cdispec.Kind    // the pool's CDI kind, without devices
	rules     pool.Pool
	// lists is each resource's device list: the pool's
	// Configuration-level resource and its instances' Instance-level ones.
	lists map[string][]deviceplugin.Device
}

// view returns pool poolName's current view.
func (n *Node) view(poolName string) (view, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok := n.views[poolName]
	if !ok {
		return view{}, false
	}
	return *v, true
}

// rebuildViews builds every pool's view from n.pools, n.instances and
// n.cdiNamed, and returns the resources whose device lists changed. The
// caller holds n.mu.
func (n *Node) rebuildViews() (changed []string) {
	byPool := map[string][]instance.Instance{}
	for _, in := range n.instances {
		byPool[in.Config] = append(byPool[in.Config], in)
	}
	old := n.views
	n.views = make(map[string]*view, len(n.pools))
	for name, p := range n.pools {
		v := n.newView(p, byPool[name])
		n.views[name] = v
		changed = append(changed, changedLists(old[name], v)...)
	}
	for name, v := range old {
		if _, ok := n.views[name]; !ok {
			changed = append(changed, changedLists(v, nil)...)
		}
	}
	return changed
}

// newView is pool p's view over its Instances.
func (n *Node) newView(p discovery.Pool, instances []instance.Instance) *view {
	v := &view{pool: p, instances: instances, index: make(map[string]int, len(instances)),
		devices: make(map[string]spec.DeviceInfo, len(p.Devices)), cdiNamed: n.cdiNamed[p.Name],
		kind: cdispec.Kind{Vendor: n.cfg.Domain, Class: p.Name}}
	for _, d := range p.Devices {
		v.devices[d.ID] = d
	}
	sort.Slice(v.instances, func(i, j int) bool { return v.instances[i].Name < v.instances[j].Name })
	unhealthy, numa := map[string]bool{}, map[string]int{}
	for i := range v.instances {
		in := &v.instances[i]
		v.index[in.Name] = i
		if d, seen := v.devices[in.DeviceID]; !seen || !d.Healthy || n.heldElsewhere[p.Name][in.DeviceID] {
			unhealthy[in.Name] = true
		}
		if nodes := v.numa(in); len(nodes) > 0 {
			numa[in.Name] = nodes[0]
		}
	}
	v.rules = pool.Pool{Node: n.cfg.NodeName, Instances: v.instances, Unhealthy: unhealthy, NUMA: numa}
	v.lists = n.deviceLists(v)
	return v
}

// deviceLists is every resource's list in v: the pool's vdevs, and each
// instance's slots.
func (n *Node) deviceLists(v *view) map[string][]deviceplugin.Device {
	lists := make(map[string][]deviceplugin.Device, len(v.instances)+1)
	var cl []deviceplugin.Device
	for _, d := range v.rules.Advertise() {
		cl = append(cl, deviceplugin.Device{ID: d.ID, Healthy: d.Healthy})
	}
	lists[n.resource(v.pool.Name)] = cl
	for i := range v.instances {
		in := &v.instances[i]
		var il []deviceplugin.Device
		for _, d := range v.rules.InstanceLevel(in) {
			il = append(il, deviceplugin.Device{ID: d.ID, Healthy: d.Healthy, NUMANodes: v.numa(in)})
		}
		lists[n.resource(in.Name)] = il
	}
	return lists
}

// changedLists returns the resources whose lists differ between two views
// of a pool; nil stands for a pool that is not there.
func changedLists(old, cur *view) []string {
	var oldLists, curLists map[string][]deviceplugin.Device
	if old != nil {
		oldLists = old.lists
	}
	if cur != nil {
		curLists = cur.lists
	}
	var changed []string
	for res, l := range curLists {
		if prev, ok := oldLists[res]; !ok || !deviceplugin.Equal(prev, l) {
			changed = append(changed, res)
		}
	}
	for res := range oldLists {
		if _, ok := curLists[res]; !ok {
			changed = append(changed, res)
		}
	}
	return changed
}

// Usage is every pool's devices and slots, for the metrics.
func (n *Node) Usage() []metrics.PoolUsage {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]metrics.PoolUsage, 0, len(n.views))
	for name, v := range n.views {
		u := metrics.PoolUsage{Resource: n.resource(name), Devices: len(v.pool.Devices)}
		for _, d := range v.pool.Devices {
			if d.Healthy {
				u.Healthy++
			}
		}
		for i := range v.instances {
			in := &v.instances[i]
			u.Slots += in.Capacity
			u.Used += in.Capacity - in.FreeSlots()
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

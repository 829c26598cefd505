package node

import (
	"context"
	"sort"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/deviceplugin"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
)

// Publish records a discovery result, the pools this node serves through
// device plugins: the store learns what this node sees, then the device
// plugins are started and stopped to match. It may be called before Run.
//
// The CDI spec files are written first: a device the kubelet is offered
// can already be named by CDI, and a device that is gone is no longer
// named by the time its plugin stops. A device that vanished while a
// container holds it is among the pools still (discovery.Pool.Vanished),
// unhealthy: its name stays resolvable and its slots stay claimed.
func (n *Node) Publish(ctx context.Context, u discovery.Update) {
	pools := u.Pools
	named := n.writeSpecs(pools)
	next := map[string]discovery.Pool{}
	for _, p := range pools {
		next[p.Name] = p
		if err := n.cfg.Store.Observe(ctx, n.cfg.NodeName, p.Name, n.seen(p)); err != nil {
			n.log().Error("recording discovered devices", "pool", p.Name, "error", err)
		}
	}
	n.mu.Lock()
	gone := []string{}
	for name := range n.pools {
		if _, ok := next[name]; !ok {
			gone = append(gone, name)
		}
	}
	var added []discovery.Pool
	for name, p := range next {
		if _, ok := n.pools[name]; !ok {
			added = append(added, p)
		}
	}
	n.pools, n.cdiNamed, n.poolsEvent = next, named, u.Event
	n.ready = true
	n.mu.Unlock()
	n.holdForeign(ctx, added)
	for _, name := range gone {
		if err := n.cfg.Store.Observe(ctx, n.cfg.NodeName, name, nil); err != nil {
			n.log().Error("recording a vanished pool", "pool", name, "error", err)
		}
	}
	n.refresh(ctx)
	n.reconcilePlugins(ctx)
}

// holdForeign marks, for pools the node did not serve before, the devices
// that allocations of no slot of this node hold as held elsewhere, before
// their device plugins start: a pool that moved from DRA under running
// pods must not offer its claims' devices until slot reclaim, which asks
// the kubelet what its containers hold, has decided (reclaim.Foreign).
// Where the store cannot say which slots are the node's (its list lacks
// the pool, or fails), every allocation is taken for another's until
// reclaim can tell. A drop-in whose plugin cannot LIST marks nothing.
func (n *Node) holdForeign(ctx context.Context, pools []discovery.Pool) {
	if len(pools) == 0 {
		return
	}
	all, err := n.cfg.Store.List(ctx)
	own := map[string]bool{}
	if lacking := instance.Lacking(err); err == nil || lacking != nil {
		for _, s := range reclaim.Claimed(all, n.cfg.NodeName, n.cfg.Domain) {
			if !lacking[s.Pool] {
				own[s.Claim.Slot] = true
			}
		}
	}
	byDropIn := map[string][]discovery.Pool{}
	for _, p := range pools {
		byDropIn[p.Conf.Path] = append(byDropIn[p.Conf.Path], p)
	}
	for _, group := range byDropIn {
		l, err := group[0].Plugin.List(ctx)
		if err != nil {
			continue
		}
		var foreign []spec.Allocation
		for _, a := range l.Allocations {
			if !own[a.RequestID] {
				foreign = append(foreign, a)
			}
		}
		held := reclaim.Devices(foreign)
		n.mu.Lock()
		for _, p := range group {
			n.heldElsewhere[p.Name] = held
		}
		n.mu.Unlock()
	}
}

// writeSpecs writes the pools' CDI spec files and returns, per pool, the
// devices they name; nil when the node writes none.
func (n *Node) writeSpecs(pools []discovery.Pool) map[string]map[string]bool {
	if n.cfg.CDI == nil {
		return nil
	}
	kinds := make([]cdispec.Kind, 0, len(pools))
	for _, p := range pools {
		kinds = append(kinds, n.cdiKind(p))
	}
	named, err := n.cfg.CDI.Sync(kinds)
	if err != nil {
		n.specFailure.Failed(n.log(), "writing CDI spec files: devices without one go to containers as device nodes, without a CDI name",
			err, "dir", n.cfg.CDI.Path())
	} else {
		n.specFailure.Succeeded(n.log(), "writing CDI spec files works again", "dir", n.cfg.CDI.Path())
	}
	return named
}

// cdiKind is pool p as a CDI kind: <domain>/<pool>, its devices named by
// their ids.
func (n *Node) cdiKind(p discovery.Pool) cdispec.Kind {
	return cdispec.PoolKind(n.cfg.Domain, p.Name, p.Devices)
}

// seen turns a pool's devices into the Instances this node sees.
func (n *Node) seen(p discovery.Pool) []instance.Instance {
	out := make([]instance.Instance, 0, len(p.Devices))
	for _, d := range p.Devices {
		out = append(out, instance.Instance{
			Name: instance.Name(p.Name, d.ID, n.cfg.NodeName, d.Shared), Config: p.Name, DeviceID: d.ID,
			Shared: d.Shared, Capacity: d.Capacity, Properties: d.Properties,
		})
	}
	return out
}

// reconcilePlugins runs one device plugin per pool and per instance this
// node sees, and stops the others.
func (n *Node) reconcilePlugins(ctx context.Context) {
	want := map[string]deviceplugin.Handler{}
	n.mu.Lock()
	for _, p := range n.pools {
		want[n.resource(p.Name)] = &configurationLevelHandler{n: n, pool: p.Name}
		if !n.instanceLevel(p) {
			continue
		}
		for _, in := range n.seen(p) {
			want[n.resource(in.Name)] = &instanceLevelHandler{n: n, instance: in.Name, pool: p.Name}
		}
	}
	for name := range n.poolLevelOnly {
		if _, ok := n.pools[name]; !ok {
			delete(n.poolLevelOnly, name)
		}
	}
	var stop []string
	for res := range n.running {
		if _, ok := want[res]; !ok {
			stop = append(stop, res)
		}
	}
	sort.Strings(stop)
	for _, res := range stop {
		n.plugins.Remove(res)
		delete(n.running, res)
		delete(n.registered, res)
	}
	var start []string
	for res, h := range want {
		if n.running[res] {
			continue
		}
		n.running[res] = true
		n.plugins.Add(deviceplugin.Spec{Resource: res, Handler: h, Preferred: isConfigurationLevel(h), Sent: func() { n.sent(res) }})
		start = append(start, res)
	}
	sort.Strings(start)
	if len(start) > 0 || len(stop) > 0 {
		// One line, not one per resource: a pool may have thousands.
		n.log().Info("device plugins changed", "started", len(start), "stopped", len(stop), "running", len(n.running),
			"startedFirst", start[:min(len(start), 5)], "stoppedFirst", stop[:min(len(stop), 5)])
	}
	n.mu.Unlock()
}

// isConfigurationLevel says whether h is a Configuration-level handler,
// the only kind that advertises GetPreferredAllocation: an Instance-level
// plugin's slots are all one device, so it has no preference to give.
func isConfigurationLevel(h deviceplugin.Handler) bool {
	_, ok := h.(*configurationLevelHandler)
	return ok
}

// instanceLevel says whether pool p gets Instance-level resources
// (Config.MaxInstanceLevel), logging a change of the answer once. The
// caller holds n.mu.
func (n *Node) instanceLevel(p discovery.Pool) bool {
	limit := n.cfg.MaxInstanceLevel
	ok := limit <= 0 || len(p.Devices) <= limit
	if !ok && !n.poolLevelOnly[p.Name] {
		n.log().Warn("pool offered at the Configuration level only: it has more devices than Instance-level resources may be made for",
			"pool", p.Name, "devices", len(p.Devices), "maxInstanceLevelDevices", limit)
	}
	if ok && n.poolLevelOnly[p.Name] {
		n.log().Info("pool offered at the Instance level again", "pool", p.Name, "devices", len(p.Devices))
	}
	n.poolLevelOnly[p.Name] = !ok
	return ok
}

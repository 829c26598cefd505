package engine

import (
	"sort"

	"github.com/cdiexec/cdi/skel"
	"github.com/cdiexec/cdi/spec"
)

func (e *engine) info(a *skel.Args) (*spec.InfoResult, error) {
	var out *spec.InfoResult
	err := e.view(a, func(c *call) error {
		out = c.info()
		return nil
	})
	return out, err
}

// info counts, per served resource-spec, the usage slots of its healthy
// devices (the node's total offer) and lists the inventory. The
// configuration's type always has a count, 0 when only its subtypes are
// served (generic's dev-serial, dev-video): SPEC.md requires it.
func (c *call) info() *spec.InfoResult {
	r := &spec.InfoResult{Counts: map[string]int{c.args.Config.Type: 0}, Devices: []spec.DeviceInfo{}, Skipped: c.host.skipped}
	for _, rs := range c.inv.Resources {
		r.Counts[rs.String()] = 0
	}
	u := c.usage()
	for i := range c.inv.Devices {
		d := &c.inv.Devices[i]
		if d.Healthy {
			r.Counts[d.Resource.String()] += d.Capacity
		}
		r.Devices = append(r.Devices, spec.DeviceInfo{
			ID: d.ID, Resource: d.Resource.String(), DeviceNodes: nodesFor(d), NUMANode: numaNode(d),
			Healthy: d.Healthy, Capacity: d.Capacity, Used: len(u[d.ID]), Shared: d.Shared, Properties: d.Properties,
		})
	}
	return r
}

func (e *engine) del(a *skel.Args) error {
	return e.runState(a, func(c *call) error {
		if _, ok := c.state.Allocations[a.RequestID]; !ok {
			return spec.NewError(spec.CodeUnknownRequestID, "")
		}
		delete(c.state.Allocations, a.RequestID)
		return nil
	})
}

func (e *engine) list(a *skel.Args) (*spec.ListResult, error) {
	out := &spec.ListResult{Allocations: []spec.Allocation{}}
	err := e.viewState(a, func(c *call) error {
		for id, rec := range c.state.Allocations {
			out.Allocations = append(out.Allocations, spec.Allocation{RequestID: id, Request: rec.Request, Created: rec.Created, Result: rec.Result.ForVersion(a.Version)})
		}
		return nil
	})
	sort.Slice(out.Allocations, func(i, j int) bool {
		x, y := out.Allocations[i], out.Allocations[j]
		if !x.Created.Equal(y.Created) {
			return x.Created.Before(y.Created)
		}
		return x.RequestID < y.RequestID
	})
	return out, err
}

// gc releases every allocation whose request-id is not in the valid set.
func (e *engine) gc(a *skel.Args) (*spec.GCResult, error) {
	out := &spec.GCResult{Released: []string{}}
	err := e.runState(a, func(c *call) error {
		valid := make(map[string]bool, len(a.ValidRequestIDs))
		for _, id := range a.ValidRequestIDs {
			valid[id] = true
		}
		for id := range c.state.Allocations {
			if !valid[id] {
				delete(c.state.Allocations, id)
				out.Released = append(out.Released, id)
			}
		}
		return nil
	})
	sort.Strings(out.Released)
	return out, err
}

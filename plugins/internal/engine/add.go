package engine

import (
	"slices"
	"sort"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/skel"
	"github.com/cdiexec/cdi/spec"
)

func (e *engine) add(a *skel.Args) (*spec.AddResult, error) {
	var out *spec.AddResult
	err := e.run(a, func(c *call) error {
		r, err := c.add()
		out = r
		return err
	})
	return out, err
}

// add allocates the whole request or nothing. Nothing in the state changes
// until every item has found its devices.
func (c *call) add() (*spec.AddResult, error) {
	a := c.args
	for _, it := range a.Request {
		if !c.serves(it.Spec) {
			return nil, spec.NewError(spec.CodeUnsupportedResource, "Unsupported resource-spec: %s", it.Spec)
		}
	}
	if rec, ok := c.state.Allocations[a.RequestID]; ok {
		return c.repeat(rec)
	}
	pinned, err := c.pinned()
	if err != nil {
		return nil, err
	}
	u := c.usage()
	var picked []*Device
	var units []spec.Unit
	for _, it := range a.Request {
		devs, err := c.pick(it, pinned, u)
		if err != nil {
			return nil, err
		}
		for _, d := range devs {
			numaNode(d) // for the result's numa_locality
			slot := u.lowestFree(d)
			u.take(d.ID, slot)
			picked = append(picked, d)
			units = append(units, spec.Unit{Resource: it.Spec.String(), Device: d.ID, Slot: slot})
		}
	}
	result := buildResult(picked, units, c.opts.cdiKind)
	c.state.Allocations[a.RequestID] = &store.Record{
		Request: a.Request.String(), Devices: a.Devices, NUMANodes: a.NUMANodes, Created: c.now.UTC(), Result: *result,
	}
	return result, nil
}

// repeat answers an ADD for a request-id that already holds an allocation:
// the same request gets the same result (a caller retrying after a crash),
// a different one is a conflict.
func (c *call) repeat(rec *store.Record) (*spec.AddResult, error) {
	a := c.args
	same := canonical(rec.Request) == canonical(a.Request.String()) &&
		slices.Equal(rec.Devices, a.Devices) && slices.Equal(rec.NUMANodes, a.NUMANodes)
	if !same {
		return nil, spec.NewError(spec.CodeRequestConflict,
			"request-id %s already holds an allocation for %q (devices %v, NUMA %v); DEL it first",
			a.RequestID, rec.Request, rec.Devices, rec.NUMANodes)
	}
	r := rec.Result
	return &r, nil
}

// canonical orders a request's items so that "a:1,b:2" and "b:2,a:1" compare equal.
func canonical(request string) string {
	items := strings.Split(request, ",")
	sort.Strings(items)
	return strings.Join(items, ",")
}

// pinned resolves CDI_REQUEST_DEVICES; nil means no pin.
func (c *call) pinned() (map[string]bool, error) {
	if c.args.Devices == nil {
		return nil, nil
	}
	set := map[string]bool{}
	for _, id := range c.args.Devices {
		if d := c.device(id); d == nil || !c.usable(d) {
			return nil, spec.NewError(spec.CodeUnknownDevice, "Unknown device: %s", id)
		}
		set[id] = true
	}
	return set, nil
}

// pick chooses it.Amount distinct devices of it.Spec with a free slot:
// those on the requested NUMA nodes first, then those with more free slots,
// then in discovery order.
func (c *call) pick(it spec.RequestItem, pinned map[string]bool, u usage) ([]*Device, error) {
	var cands []*Device
	for i := range c.inv.Devices {
		d := &c.inv.Devices[i]
		if d.Resource == it.Spec && d.Healthy && (pinned == nil || pinned[d.ID]) && u.free(d) > 0 {
			cands = append(cands, d)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		ni, nj := c.numaLocal(cands[i]), c.numaLocal(cands[j])
		if ni != nj {
			return ni
		}
		return u.free(cands[i]) > u.free(cands[j])
	})
	// The nodes are checked in order of preference, and only until enough
	// pass: dropping the ones that fail from the sorted list picks what
	// sorting only the devices that pass would.
	usable := cands[:0]
	for _, d := range cands {
		if len(usable) < it.Amount && c.usable(d) {
			usable = append(usable, d)
		}
	}
	if len(usable) < it.Amount {
		return nil, spec.NewError(spec.CodeInsufficientResources, "%s: %d requested, %d available%s",
			it.Spec, it.Amount, len(usable), pinNote(pinned))
	}
	return usable, nil
}

// usable checks d's node files (checkNodeFiles) the first time ADD
// considers d, noting on stderr a device it skips, as INFO's discovery
// does for every device.
func (c *call) usable(d *Device) bool {
	ok, checked := c.nodesOK[d.ID]
	if !checked {
		err := checkNodeFiles(c.host, d.Nodes)
		if err != nil {
			c.host.Skip(d.ID, reasonOf(err), err)
		}
		ok = err == nil
		c.nodesOK[d.ID] = ok
	}
	return ok
}

func pinNote(pinned map[string]bool) string {
	if pinned == nil {
		return ""
	}
	return " among the devices in " + spec.EnvRequestDevices
}

// numaLocal reports whether d is on a NUMA node the request asks for;
// without such a request, d's node is not looked up.
func (c *call) numaLocal(d *Device) bool {
	if len(c.args.NUMANodes) == 0 {
		return false
	}
	n := numaNode(d)
	return n != nil && slices.Contains(c.args.NUMANodes, *n)
}

// numaNode is d's NUMA node, looked up the first time where the family
// deferred it (Device.LookUpNUMA).
func numaNode(d *Device) *int {
	if d.LookUpNUMA != nil {
		d.NUMANode, d.LookUpNUMA = d.LookUpNUMA(), nil
	}
	return d.NUMANode
}

package node

import (
	"context"
	"errors"
	"fmt"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/deviceplugin"
	"github.com/cdiexec/cdi/bridge/instance"
)

func (v view) numa(in *instance.Instance) []int {
	if d, ok := v.devices[in.DeviceID]; ok && d.NUMANode != nil && *d.NUMANode >= 0 {
		return []int{*d.NUMANode}
	}
	return nil
}

func (v view) byName(name string) *instance.Instance {
	if i, ok := v.index[name]; ok {
		return &v.instances[i]
	}
	return nil
}

// grant returns the grant of one claim of the view's pool.
func (n *Node) grant(v view, c instance.Claim, vdev string) (grant, error) {
	in := v.byName(c.Instance)
	if in == nil {
		return grant{}, fmt.Errorf("slot %s: %w", c.Slot, instance.ErrNoSlot)
	}
	return grant{Claim: c, VDev: vdev, Held: in.Usage[c.Slot] == c.Value, Plugin: v.pool.Plugin,
		Resource: v.pool.Resource, DeviceID: in.DeviceID, CDI: v.cdiDeviceOf(in.DeviceID)}, nil
}

// cdiDeviceOf is device id as the pool's CDI spec file holds it, nil when
// the file does not name it.
func (v view) cdiDeviceOf(id string) *cdiDevice {
	if !v.cdiNamed[id] {
		return nil
	}
	return &cdiDevice{Name: v.kind.QualifiedName(id), Nodes: v.devices[id].DeviceNodes}
}

// instanceLevelHandler is the Instance-level plugin of one Instance.
type instanceLevelHandler struct {
	n        *Node
	instance string
	pool     string
}

func (h *instanceLevelHandler) Devices() []deviceplugin.Device {
	v, _ := h.n.view(h.pool)
	return v.lists[h.n.resource(h.instance)]
}

func (h *instanceLevelHandler) Changes() (<-chan struct{}, func()) {
	return h.n.streams.Subscribe(h.n.resource(h.instance))
}

func (h *instanceLevelHandler) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	h.n.allocMu.RLock()
	defer h.n.allocMu.RUnlock()
	v, _ := h.n.view(h.pool)
	res := h.n.resource(h.instance)
	containers := make([][]grant, len(req.ContainerRequests))
	for i, c := range req.ContainerRequests {
		for _, slot := range c.DevicesIds {
			g, err := h.n.grant(v, instance.Claim{Instance: h.instance, Slot: slot, Value: instance.InstanceLevelUsage(h.n.cfg.NodeName)}, "")
			if err != nil {
				h.n.reportAllocate(res, LevelInstance, ResultDenied)
				return nil, err
			}
			containers[i] = append(containers[i], g)
		}
	}
	return h.n.allocate(ctx, res, LevelInstance, containers)
}

// PreferredAllocation has no preference to give: every slot of an
// Instance-level plugin is a slot of the same device, on the same NUMA
// node, so any choice the kubelet makes is as good as another. The
// plugin does not advertise the call (see reconcilePlugins).
func (h *instanceLevelHandler) PreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return nil, nil
}

// configurationLevelHandler is the Configuration-level plugin of one pool.
type configurationLevelHandler struct {
	n    *Node
	pool string
}

func (h *configurationLevelHandler) Devices() []deviceplugin.Device {
	v, _ := h.n.view(h.pool)
	return v.lists[h.n.resource(h.pool)]
}

func (h *configurationLevelHandler) Changes() (<-chan struct{}, func()) {
	return h.n.streams.Subscribe(h.n.resource(h.pool))
}

// replans bounds how often a Configuration-level Allocate plans again
// after another node took a slot it chose: each plan sees the slots the
// lost races took, so with D free devices and N <= D nodes racing, every
// node is granted within N plans.
const replans = 4

func (h *configurationLevelHandler) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	h.n.allocMu.RLock()
	defer h.n.allocMu.RUnlock()
	requests := make([][]string, len(req.ContainerRequests))
	for i, c := range req.ContainerRequests {
		requests[i] = c.DevicesIds
	}
	res := h.n.resource(h.pool)
	for plan := 1; ; plan++ {
		v, _ := h.n.view(h.pool)
		containers, err := h.grants(v, requests)
		if err != nil {
			h.n.log().Warn("Configuration-level allocation denied", "pool", h.pool, "request", requests, "error", err)
			h.n.reportAllocate(res, LevelConfiguration, ResultDenied)
			return nil, err
		}
		resp, err := h.n.alloc.Allocate(ctx, containers)
		if errors.Is(err, instance.ErrSlotTaken) && plan < replans {
			// Claim changed nothing; the store now knows who holds the
			// slot, so the next plan picks another device.
			h.n.log().Info("another node took a slot first; planning again", "pool", h.pool, "plan", plan, "error", err)
			h.n.refresh(ctx)
			continue
		}
		return h.n.finish(ctx, res, LevelConfiguration, containers, resp, err)
	}
}

// grants maps the vdevs of each container request to Grants by the
// pool's rules.
func (h *configurationLevelHandler) grants(v view, requests [][]string) ([][]grant, error) {
	claims, err := v.rules.Allocate(requests)
	if err != nil {
		return nil, err
	}
	containers := make([][]grant, len(claims))
	for i, cs := range claims {
		for j, c := range cs {
			g, err := h.n.grant(v, c, requests[i][j])
			if err != nil {
				return nil, err
			}
			containers[i] = append(containers[i], g)
		}
	}
	return containers, nil
}

// PreferredAllocation steers the kubelet, per container request, to vdevs
// of distinct instances (pool.Prefer), so that it does not pick two that
// Allocate must deny for sharing a device.
func (h *configurationLevelHandler) PreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	v, _ := h.n.view(h.pool)
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids := v.rules.Prefer(c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// allocate runs the allocator and reports the outcome (finish).
func (n *Node) allocate(ctx context.Context, resource, level string, containers [][]grant) (*pluginapi.AllocateResponse, error) {
	resp, err := n.alloc.Allocate(ctx, containers)
	return n.finish(ctx, resource, level, containers, resp, err)
}

// finish reports an allocator's outcome. A success reaches the streams
// through the store's change feed; a failure also re-reads the store and
// pushes fresh lists at once, so that the kubelet stops offering what just
// failed.
func (n *Node) finish(ctx context.Context, resource, level string, containers [][]grant, resp *pluginapi.AllocateResponse, err error) (*pluginapi.AllocateResponse, error) {
	if err != nil {
		n.log().Warn("Allocate failed; what it claimed is released (in the background where the store did not answer)", "resource", resource, "error", err)
		n.reportAllocate(resource, level, ResultFailed)
		n.refresh(ctx)
		return nil, err
	}
	n.reportAllocate(resource, level, ResultOK)
	slots, devices := granted(containers)
	// One line per granted call: the operator's answer to "which device
	// did that pod get". Not "level": that key is the record's severity.
	n.log().Info("allocated", "resource", resource, "resourceLevel", level, "slots", slots, "devices", devices)
	return resp, nil
}

// granted lists the slots and the distinct device ids of a call's grants.
func granted(containers [][]grant) (slots, devices []string) {
	seen := map[string]bool{}
	for _, c := range containers {
		for _, g := range c {
			slots = append(slots, g.Claim.Slot)
			if !seen[g.DeviceID] {
				seen[g.DeviceID] = true
				devices = append(devices, g.DeviceID)
			}
		}
	}
	return slots, devices
}

package dradevices

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

func cameraPool() discovery.Pool {
	conf := &invoke.Conf{Path: "/etc/cdi/camera.d/endpoint.conf", Config: spec.Config{Type: "camera"}}
	return discovery.Pool{Name: "camera-endpoint", Resource: "camera", Conf: conf}
}

func camera(id string, capacity int, nodes ...string) instance.Instance {
	return instance.Instance{Name: instance.Name("camera-endpoint", id, "", true), Config: "camera-endpoint", DeviceID: id,
		Shared: true, Capacity: capacity, Nodes: nodes, Properties: map[string]string{"location": "gate"}}
}

func TestSharedPoolNameNeverMeetsANodesPool(t *testing.T) {
	for _, tc := range []struct{ node, pool string }{{"n", "camera-endpoint"}, {"camera-endpoint", ""}, {"a.b", "c"}} {
		if SharedPoolName(tc.pool) == PoolName(tc.node, tc.pool) || SharedPoolName(tc.node) == PoolName(tc.node, tc.pool) {
			t.Errorf("node %q, pool %q: a shared pool's name is a node's", tc.node, tc.pool)
		}
	}
}

func TestSharedResources(t *testing.T) {
	local := camera("tty1", 1, "a")
	local.Shared = false
	instances := []instance.Instance{
		camera("gate", 2, "b", "a"), camera("dock", 1, "c"), camera("unseen", 2),
		local, {Name: "x", Config: "other-pool", DeviceID: "x", Shared: true, Capacity: 1, Nodes: []string{"a"}},
	}
	hostname := func(node string) string { return "host-" + node }
	res := SharedResources([]discovery.Pool{cameraPool(), gpuPool()}, instances, hostname)
	if len(res.Pools) != 1 {
		t.Fatalf("pools %v, want camera-endpoint's only: gpu-drm has no shared device, other-pool is not served", res.Pools)
	}
	pool := res.Pools[SharedPoolName("camera-endpoint")]
	if len(pool.Slices) != 1 || pool.Slices[0].PerDeviceNodeSelection == nil || !*pool.Slices[0].PerDeviceNodeSelection {
		t.Fatalf("slices %+v, want one selecting nodes per device", pool.Slices)
	}
	devs := pool.Slices[0].Devices
	if len(devs) != 2 || devs[0].Name != "dock" || devs[1].Name != "gate" {
		t.Fatalf("devices %+v, want dock and gate: a device no node sees is left out, as are node-local ones", devs)
	}
	for _, tc := range []struct {
		dev   int
		nodes string
	}{{0, "[host-c]"}, {1, "[host-a host-b]"}} {
		d := devs[tc.dev]
		if got := fmt.Sprint(selectedNodes(d.NodeSelector)); got != tc.nodes {
			t.Errorf("device %s selects %s, want %s", d.Name, got, tc.nodes)
		}
		if d.NodeName != nil || d.AllNodes != nil {
			t.Errorf("device %s: nodeName %v, allNodes %v beside its selector", d.Name, d.NodeName, d.AllNodes)
		}
		for name, want := range map[string]string{AttrID: d.Name, AttrResource: "camera", AttrPool: "camera-endpoint",
			AttrCDIKind: "cdi.local/camera", "location": "gate"} {
			if a := d.Attributes[resourceapi.QualifiedName(name)]; a.StringValue == nil || *a.StringValue != want {
				t.Errorf("device %s: attribute %s = %+v, want %q", d.Name, name, a, want)
			}
		}
	}
	if slots := devs[1].Capacity[CapacitySlots]; slots.Value.Value() != 2 || devs[0].Capacity != nil {
		t.Errorf("capacities %v, %v: want 2 slots on gate, none on dock", devs[0].Capacity, devs[1].Capacity)
	}
}

func TestNodesSelector(t *testing.T) {
	for _, tc := range []struct {
		hostnames []string
		want      string
	}{
		{[]string{"a"}, "[a]"},
		{[]string{"b", "a", "b"}, "[a b]"},
	} {
		t.Run(fmt.Sprint(tc.hostnames), func(t *testing.T) {
			if got := fmt.Sprint(selectedNodes(NodesSelector(tc.hostnames))); got != tc.want {
				t.Errorf("NodesSelector(%v) selects %s, want %s", tc.hostnames, got, tc.want)
			}
		})
	}
}

// selectedNodes is the hostnames s selects if it is one term of one
// kubernetes.io/hostname In requirement, the only form the scheduler
// takes of a device's selector for several nodes; else what s is.
func selectedNodes(s *corev1.NodeSelector) []string {
	if len(s.NodeSelectorTerms) != 1 {
		return []string{fmt.Sprintf("unexpected terms %+v", s.NodeSelectorTerms)}
	}
	term := s.NodeSelectorTerms[0]
	r := term.MatchExpressions
	if len(term.MatchFields) != 0 || len(r) != 1 || r[0].Key != corev1.LabelHostname || r[0].Operator != corev1.NodeSelectorOpIn {
		return []string{fmt.Sprintf("unexpected term %+v", term)}
	}
	return r[0].Values
}

// cameraRig is a Preparer of node n over a camera of capacity 2 that the
// real endpoint plugin serves, beside the terminals of newRig.
func cameraRig(t *testing.T) *rig {
	t.Helper()
	r := newRig(t, 1)
	confDir := t.TempDir()
	writeDropIn(t, confDir, "camera.d/endpoint.conf", exectest.Conf(t, "0.1.0", "camera", "endpoint", map[string]any{
		"stateDir": t.TempDir(), "capacity": 2, "endpoints": []map[string]any{{"id": "gate", "url": "rtsp://192.0.2.1/gate"}},
	}))
	cams, err := (&discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}}).Discover(context.Background())
	if err != nil || len(cams) != 1 || len(cams[0].Devices) != 1 || !cams[0].Devices[0].Shared {
		t.Fatalf("discovery of the camera: %+v, %v", cams, err)
	}
	r.pools = append(r.pools, cams...)
	r.p.SetPools(r.pools)
	return r
}

// A share of the shared camera is prepared on a node that sees it: the
// endpoint plugin's ADD, pinned to it, with a request-id per claim.
func TestPrepareSharedDevice(t *testing.T) {
	r := cameraRig(t)
	ctx := context.Background()
	for _, uid := range []types.UID{"u1", "u2"} {
		devs, err := r.p.Prepare(ctx, claim(uid, result{"cdi.local", SharedPoolName("camera-endpoint"), "gate"}))
		if err != nil {
			t.Fatalf("claim %s: %v", uid, err)
		}
		if len(devs) != 1 || devs[0].Pool != "camera-endpoint" || devs[0].Name != "gate" || len(devs[0].CDIIDs) != 1 {
			t.Fatalf("claim %s: devices %+v, want gate of the shared pool with a CDI name", uid, devs)
		}
		s, ok := r.spec(t, uid)
		if !ok || len(s.Devices) != 1 || s.Devices[0].ContainerEdits.Env == nil {
			t.Errorf("claim %s: spec %+v, want the camera's env", uid, s)
		}
	}
	ids := r.requestIDs(t, "camera-endpoint")
	if fmt.Sprint(ids) != "[u1-0 u2-0]" {
		t.Errorf("camera allocations %v, want one per claim", ids)
	}
	// After a restart, Unprepare reads the shared device from the
	// checkpoint and DELs it.
	r.p = r.preparer(t)
	for _, uid := range []types.UID{"u1", "u2"} {
		if err := r.p.Unprepare(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	if ids := r.requestIDs(t, "camera-endpoint"); len(ids) != 0 {
		t.Errorf("camera allocations %v after Unprepare", ids)
	}
}

func TestPrepareSharedRefuses(t *testing.T) {
	r := cameraRig(t)
	for name, c := range map[string]struct{ pool, device string }{
		"a camera this node does not see": {SharedPoolName("camera-endpoint"), "dock"},
		"a pool this node does not serve": {SharedPoolName("gpu-drm"), "gate"},
		"a node-local device as shared":   {SharedPoolName("tty-generic"), r.devices[0]},
		"the shared device as node-local": {PoolName("n", "camera-endpoint"), "gate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.p.Prepare(context.Background(), claim("u1", result{"cdi.local", c.pool, c.device}))
			if !errors.Is(err, ErrNotAllocatable) {
				t.Errorf("Prepare = %v, want ErrNotAllocatable", err)
			}
		})
	}
	if ids := r.requestIDs(t, "camera-endpoint"); len(ids) != 0 {
		t.Errorf("camera allocations %v", ids)
	}
}

package kubelet

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/instance"
)

// TestRegistration: every device of the fixture reaches the manager
// twice, as its Instance-level resource with one id per slot and the
// device's NUMA node, and in its pool's Configuration-level resource.
func TestRegistration(t *testing.T) {
	k := startKubelet(t)
	b := startBridge(t, k, newBridgeFiles(t))
	k.waitCapacity(t, b, baseline())

	all := k.m.GetAllocatableDevices(klog.Background())
	pools := map[string]int{}
	for _, d := range fixtureDevices() {
		pools[pool(d.pool)]++
		var want []string
		for i := range int(d.capacity) {
			want = append(want, instance.SlotID(d.instanceName(), i))
		}
		if got := sortedIDs(all[d.resource()]); !slices.Equal(got, want) {
			t.Errorf("%s (%s): ids %q, want %q", d.resource(), d.id, got, want)
		}
		for id, dev := range all[d.resource()] {
			if got := numaOf(dev); got != d.numa {
				t.Errorf("%s slot %s: NUMA node %d, want %d", d.resource(), id, got, d.numa)
			}
		}
	}
	for res, n := range pools {
		if got := len(all[res]); got != n {
			t.Errorf("%s: %d virtual devices, want one per device, %d", res, got, n)
		}
	}
}

// TestAllocate allocates through the manager as the kubelet admits pods:
// an Instance-level slot, then Configuration-level devices of the same
// pool, until the manager refuses what is no longer there.
func TestAllocate(t *testing.T) {
	k := startKubelet(t)
	b := startBridge(t, k, newBridgeFiles(t))
	want := baseline()
	k.waitCapacity(t, b, want)
	gpu := fixtureDevice("0000:03:00.0")
	used := map[string]bool{gpu.id: true}

	// The kubelet's own claim leaves the slot healthy in its resource;
	// the pool loses that device's placeholder.
	il := admit(t, k, "il", container("c", map[string]int64{gpu.resource(): 1}))
	if got := deviceIDs(k.granted(t, il, "c")); !slices.Equal(got, []string{gpu.id}) {
		t.Fatalf("Instance-level pod got %q, want %s", got, gpu.id)
	}
	want[pool("gpu-drm")] = counts{3, 3}
	k.waitCapacity(t, b, want)
	deny(t, k, "il-again", false, container("c", map[string]int64{gpu.resource(): 1}))

	// Two GPUs of the pool and a camera in one container: distinct free
	// GPUs; each becomes unhealthy in its own resource.
	cl := admit(t, k, "cl", container("c", map[string]int64{pool("gpu-drm"): 2, pool("camera-endpoint"): 1}))
	for _, g := range k.granted(t, cl, "c") {
		if used[g.device.id] {
			t.Fatalf("Configuration-level pod got %s, which is taken", g.device.id)
		}
		used[g.device.id] = true
		c := want[g.device.resource()]
		want[g.device.resource()] = counts{c.capacity, c.allocatable - 1}
	}
	if len(used) != 4 {
		t.Fatalf("in use: %v, want four devices: the Instance-level GPU, two more and a camera", used)
	}
	want[pool("gpu-drm")] = counts{3, 3}         // two claimed, one placeholder
	want[pool("camera-endpoint")] = counts{3, 3} // one claimed, two placeholders
	k.waitCapacity(t, b, want)

	// One GPU is left: two are refused by the manager, one is granted.
	deny(t, k, "cl-two", false, container("c", map[string]int64{pool("gpu-drm"): 2}))
	last := admit(t, k, "cl-last", container("c", map[string]int64{pool("gpu-drm"): 1}))
	g := k.granted(t, last, "c")
	if len(g) != 1 || used[g[0].device.id] {
		t.Fatalf("the last GPU went to %v; in use before: %v", deviceIDs(g), used)
	}
	want[g[0].device.resource()] = counts{1, 0}
	k.waitCapacity(t, b, want)
	deny(t, k, "cl-none", false, container("c", map[string]int64{pool("gpu-drm"): 1}))
}

// TestDeniedByBridge: a pod that ended leaves its Configuration-level
// claim behind (until reclaim), and the kubelet offers its vdev again.
// Asked for that vdev and a placeholder when only the claimed camera has
// free slots, the bridge must refuse, since one container request never
// gets two slots of one device, and keep the old claim.
func TestDeniedByBridge(t *testing.T) {
	k := startKubelet(t)
	b := startBridge(t, k, newBridgeFiles(t))
	want := baseline()
	k.waitCapacity(t, b, want)
	dock, lobby := fixtureDevice("loading-dock"), fixtureDevice("lobby")

	admit(t, k, "dock", container("c", map[string]int64{dock.resource(): 4}))
	want[pool("camera-endpoint")] = counts{1, 1}
	k.waitCapacity(t, b, want)

	one := admit(t, k, "one", container("c", map[string]int64{pool("camera-endpoint"): 1}))
	g := k.granted(t, one, "c")
	if got := deviceIDs(g); !slices.Equal(got, []string{lobby.id}) {
		t.Fatalf("the camera pool gave %q, want the only camera with free slots, %s", got, lobby.id)
	}
	held := g[0].id
	want[pool("camera-endpoint")] = counts{2, 2} // the claimed vdev and lobby's placeholder
	want[lobby.resource()] = counts{4, 3}
	k.waitCapacity(t, b, want)

	k.remove(one)
	deny(t, k, "two", true, container("c", map[string]int64{pool("camera-endpoint"): 2}))
	k.waitCapacity(t, b, want)

	// The pool still serves a container that fits.
	three := admit(t, k, "three", container("c", map[string]int64{pool("camera-endpoint"): 1}))
	g = k.granted(t, three, "c")
	if got := deviceIDs(g); !slices.Equal(got, []string{lobby.id}) {
		t.Fatalf("after the denial the camera pool gave %q, want %s", got, lobby.id)
	}
	if g[0].id != held {
		// A new vdev: a second slot of lobby, and lobby still has free ones.
		want[pool("camera-endpoint")] = counts{3, 3}
		want[lobby.resource()] = counts{4, 2}
	}
	k.waitCapacity(t, b, want)
}

// admit admits a pod that must be granted.
func admit(t *testing.T, k *kubelet, name string, containers ...v1.Container) *v1.Pod {
	t.Helper()
	pod, err := k.admit(name, containers...)
	if err != nil {
		t.Fatalf("admitting pod %s: %v", name, err)
	}
	return pod
}

// deny admits a pod that must be refused: by the device plugin (the
// bridge) when byPlugin, else by the manager itself. Nothing may be
// assigned to it.
func deny(t *testing.T, k *kubelet, name string, byPlugin bool, containers ...v1.Container) {
	t.Helper()
	pod, err := k.admit(name, containers...)
	if err == nil {
		t.Fatalf("pod %s was granted %v, want a refusal", name, k.m.GetDevices(string(pod.UID), containers[0].Name))
	}
	if isPluginError(err) != byPlugin {
		who := map[bool]string{true: "the device plugin", false: "the manager"}
		t.Fatalf("pod %s was refused by %s, want by %s: %v", name, who[isPluginError(err)], who[byPlugin], err)
	}
	t.Logf("pod %s refused as expected: %v", name, err)
	for _, c := range containers {
		if got := k.m.GetDevices("uid-"+name, c.Name); len(got) != 0 {
			t.Errorf("refused pod %s container %s holds %v", name, c.Name, got)
		}
	}
}

func sortedIDs(devs map[string]*pluginapi.Device) []string {
	var ids []string
	for id := range devs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// numaOf is a device's single NUMA node, -1 when it names none.
func numaOf(d *pluginapi.Device) int64 {
	if d.Topology == nil || len(d.Topology.Nodes) != 1 {
		return -1
	}
	return d.Topology.Nodes[0].ID
}

package kubelet

import (
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// TestKubeletRestart: a new device manager on the same directory clears
// the sockets; every resource must come back with the counts it had, the
// held devices still held, and the next pods placed around them.
func TestKubeletRestart(t *testing.T) {
	k := startKubelet(t)
	b := startBridge(t, k, newBridgeFiles(t))
	k.waitCapacity(t, b, baseline())
	held := holdGPUs(t, k, b)

	k.restart(t)
	held.checkSurvived(t, k, b)
}

// TestBridgeRestart: the bridge stops (ending its streams, with no empty
// list: the next pod of a rolling update may serve the resources already)
// or crashes, and starts again on the same files: registration returns
// with the counts from before, and the claims persist.
func TestBridgeRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		// down is what the manager reports of a resource while the bridge
		// is away: its last registration gone, every device unhealthy.
		down func(counts) counts
	}{
		{"SIGTERM", syscall.SIGTERM, func(c counts) counts { return counts{c.capacity, 0} }},
		{"SIGKILL", syscall.SIGKILL, func(c counts) counts { return counts{c.capacity, 0} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := startKubelet(t)
			files := newBridgeFiles(t)
			b := startBridge(t, k, files)
			k.waitCapacity(t, b, baseline())
			held := holdGPUs(t, k, b)

			b.stop(t, tc.sig)
			down := map[string]counts{}
			for res, c := range held.want {
				down[res] = tc.down(c)
			}
			k.waitCapacity(t, b, down)

			b = startBridge(t, k, files)
			held.checkSurvived(t, k, b)
		})
	}
}

// TestNodeRestart: the node reboots under a running pod's feet. The
// plugins' state files come back from the earlier boot, so the plugins
// release every allocation in them (their boot id no longer matches);
// the kubelet replays its cached allocations, and the bridge, starting
// again on the same Instance store, keeps every claim: the same ids stay
// held, and new pods get only the GPU nobody holds.
func TestNodeRestart(t *testing.T) {
	k := startKubelet(t)
	files := newBridgeFiles(t)
	b := startBridge(t, k, files)
	k.waitCapacity(t, b, baseline())
	held := holdGPUs(t, k, b)
	b.stop(t, syscall.SIGKILL)
	rebootStateFiles(t, files.state)
	k.restart(t)
	b = startBridge(t, k, files)
	held.checkSurvived(t, k, b)
}

// rebootStateFiles makes every plugin state file one from another boot.
func rebootStateFiles(t *testing.T, dir string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no plugin state files under %s (%v)", dir, err)
	}
	for _, path := range paths {
		var doc map[string]any
		if err := readJSON(path, &doc); err != nil {
			t.Fatal(err)
		}
		doc["bootID"] = "an-earlier-boot"
		if err := writeJSON(path, doc); err != nil {
			t.Fatal(err)
		}
	}
}

// heldGPUs is three of the four GPUs in use: one through its
// Instance-level resource, two through the pool.
type heldGPUs struct {
	il, cl     *v1.Pod
	ilIDs      []string // the slot the kubelet holds for il
	clIDs      []string // the vdevs it holds for cl
	clSlots    []string // the slots behind them
	used       map[string]bool
	want       map[string]counts
	ilResource string
}

func holdGPUs(t *testing.T, k *kubelet, b *bridge) heldGPUs {
	t.Helper()
	gpu := fixtureDevice("0000:03:00.0")
	h := heldGPUs{used: map[string]bool{gpu.id: true}, want: baseline(), ilResource: gpu.resource()}
	h.il = admit(t, k, "il", container("c", map[string]int64{gpu.resource(): 1}))
	h.cl = admit(t, k, "cl", container("c", map[string]int64{pool("gpu-drm"): 2}))
	for _, g := range k.granted(t, h.cl, "c") {
		h.used[g.device.id] = true
		h.clSlots = append(h.clSlots, g.slot)
		h.want[g.device.resource()] = counts{1, 0}
	}
	if len(h.used) != 3 {
		t.Fatalf("three GPUs should be in use, got %v", h.used)
	}
	h.want[pool("gpu-drm")] = counts{3, 3} // two claimed vdevs, one placeholder
	k.waitCapacity(t, b, h.want)
	h.ilIDs = k.devices(h.il, "c", gpu.resource())
	h.clIDs = k.devices(h.cl, "c", pool("gpu-drm"))
	return h
}

// checkSurvived waits for the counts from before, then checks that the
// manager still assigns the same ids, that the bridge still advertises
// the claimed vdevs healthy, and that new pods get only the free GPU.
func (h heldGPUs) checkSurvived(t *testing.T, k *kubelet, b *bridge) {
	t.Helper()
	k.waitCapacity(t, b, h.want)
	if got := k.devices(h.il, "c", h.ilResource); !slices.Equal(got, h.ilIDs) {
		t.Errorf("Instance-level pod holds %q, before %q", got, h.ilIDs)
	}
	if got := k.devices(h.cl, "c", pool("gpu-drm")); !slices.Equal(got, h.clIDs) {
		t.Errorf("Configuration-level pod holds %q, before %q", got, h.clIDs)
	}
	advertised := k.m.GetAllocatableDevices(klog.Background())[pool("gpu-drm")]
	for _, id := range h.clIDs {
		if _, ok := advertised[id]; !ok {
			t.Errorf("claimed vdev %s is no longer advertised healthy (advertised: %q)", id, sortedIDs(advertised))
		}
	}
	var slots []string
	for _, g := range k.granted(t, h.cl, "c") {
		slots = append(slots, g.slot)
	}
	if !slices.Equal(slots, h.clSlots) {
		t.Errorf("Configuration-level pod's slots %q, before %q", slots, h.clSlots)
	}

	next := admit(t, k, "next", container("c", map[string]int64{pool("gpu-drm"): 1}))
	g := k.granted(t, next, "c")
	if len(g) != 1 || h.used[g[0].device.id] {
		t.Fatalf("the free GPU should go to the next pod, it got %v; in use: %v", deviceIDs(g), h.used)
	}
	deny(t, k, "over", false, container("c", map[string]int64{pool("gpu-drm"): 1}))
	deny(t, k, "il-again", false, container("c", map[string]int64{h.ilResource: 1}))
}

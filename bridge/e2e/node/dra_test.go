package node

import (
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// kubeletWipingDelay is how long the kubelet waits, once a DRA driver's
// plugin is gone, before it deletes the driver's ResourceSlices of its
// node, unless the plugin registers again (defaultWipingDelay of
// k8s.io/kubernetes/pkg/kubelet/cm/dra, 1.36). A watch over a restart of
// the bridge must outlast it to show that the slices were kept.
const kubeletWipingDelay = 30 * time.Second

// TestDRA runs pods whose terminals come through the bridge's DRA front
// end on a real node: allocated by kube-scheduler from the bridge's
// ResourceSlices, prepared by the bridge for the kubelet, injected by
// containerd through the claim's CDI spec. It deletes pods, restarts the
// kubelet and the bridge under running ones, and asks for the pool's
// device-plugin resource the old way. The cameras stay with the device
// plugins.
func TestDRA(t *testing.T) {
	n := StartDRANode(t, requireNode(t).Sub("dra"), true)
	var a *ClaimPod
	if !t.Run("a pod's claim of two terminals", func(t *testing.T) {
		a = n.RunClaimPod(t, "claim-a", twoTerminals, nil, 2)
	}) {
		t.Fatal("not going on: the steps below need that pod")
	}
	var running []*ClaimPod
	if !t.Run("a deleted pod's claim is unprepared, its terminals go to the next claim", func(t *testing.T) {
		running = append(running, testUnprepare(t, n, a))
	}) {
		t.Fatal("not restarting anything: the restarts need the pod above running")
	}
	t.Run("kubelet restart", func(t *testing.T) {
		running = append(running, testDRAKubeletRestart(t, n, running))
	})
	t.Run("bridge restart", func(t *testing.T) {
		testDRABridgeRestart(t, n, running)
	})
	t.Run("an extended resource asked for the old way is served through DRA", func(t *testing.T) {
		p := n.RunClaimPod(t, "extended", "", map[string]int64{domain + "/" + draPool: 1}, 1)
		t.Logf("the scheduler's claim %s for the extended resource: requests %+v", p.Claim.Name, p.Claim.Spec.Devices.Requests)
		n.DeleteClaimPod(t, p)
	})
}

// testUnprepare runs a second pod that takes the last two terminals,
// deletes the first, checks that its claim is unprepared, and runs a
// third pod, which can have only the first one's terminals. It deletes
// the second pod too, leaving two terminals free, and returns the third.
func testUnprepare(t *testing.T, n *DRANode, a *ClaimPod) *ClaimPod {
	b := n.RunClaimPod(t, "claim-b", twoTerminals, nil, 2)
	n.DeleteClaimPod(t, a)
	c := n.RunClaimPod(t, "claim-c", twoTerminals, nil, 2)
	if !sameSet(c.IDs, a.IDs) {
		t.Errorf("pod %s got terminals %v; the only free ones were deleted pod %s's %v (pod %s holds %v)",
			c.Name, c.IDs, a.Name, a.IDs, b.Name, b.IDs)
	}
	n.DeleteClaimPod(t, b)
	return c
}

// testDRAKubeletRestart restarts the kubelet under running pods: they keep
// their containers, the node's slices list the same devices after it,
// soon, and a new pod's claim is prepared.
//
// The slices are not kept across a kubelet restart, and no driver can
// keep them: the kubelet deletes every ResourceSlice of its node when it
// starts (NewDRAPluginManager in k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin,
// 1.36: no driver has registered yet). What the bridge owes is to publish
// them again at once. With the DRA library's defaults that took 54 s here:
// its sync runs 30 s after a deletion, and its mutation cache takes a
// slice it created less than a minute before for still there. The bridge
// runs the library's controller with a sync delay of a second and a cache
// of 5 s (bridge/dra), so the slices must be back within republishBound
// of their deletion.
func testDRAKubeletRestart(t *testing.T, n *DRANode, running []*ClaimPod) *ClaimPod {
	sw, before, err := n.watchSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := n.Kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := WaitNodeReady(t.Context(), n.Cluster.Client, Name, n.Kubelet, restarted); err != nil {
		t.Fatal(err)
	}
	after, err := n.waitRepublished(t.Context(), sw)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the node's slices over the kubelet's restart (at %s): %v; UIDs before %v, after %v",
		restarted.Format("15:04:05.000"), sw.Events(), sliceUIDs(before), sliceUIDs(after))
	if gap, ok := republishGap(sw.Events()); !ok {
		t.Errorf("no slice deleted and added again over the kubelet's restart: %v", sw.Events())
	} else if gap > republishBound {
		t.Errorf("the slices were published again %v after the kubelet deleted them, want within %v", gap.Round(time.Millisecond), republishBound)
	} else {
		t.Logf("slices published again %v after the kubelet deleted them", gap.Round(time.Millisecond))
	}
	if got, want := poolDevices(after), poolDevices(before); !maps.Equal(got, want) {
		t.Errorf("after the kubelet's restart the slices list devices %v, before it %v", got, want)
	}
	if err := waitDRARegistered(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	d := n.RunClaimPod(t, "after-kubelet-restart", oneTerminalTpl, nil, 1)
	n.CheckStillRunning(t, pods(running)...)
	sw.Stop()
	return d
}

// testDRABridgeRestart restarts the bridge under running pods: they keep
// their containers, the node's slices are kept (a watch from before the
// bridge stops until the kubelet's wiping delay has passed sees no
// DELETED event, and the slices' UIDs are the same), the claims prepared
// before stay recorded, a new claim is prepared, and a pod prepared
// before the restart is unprepared correctly when deleted after it.
//
// The bridge is ready (/readyz) only once the kubelet has registered its
// DRA driver: a claim the kubelet fails to prepare for want of the driver
// is tried again only at the kubelet's next sync of its pod, a minute
// later, so a bridge ready before that would stall the next pod.
func testDRABridgeRestart(t *testing.T, n *DRANode, running []*ClaimPod) {
	sw, before, err := n.watchSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	n.StopBridge(t)
	if err := n.Bridge.Start(); err != nil {
		t.Fatal(err)
	}
	if err := waitBridgeReady(t.Context(), n.Bridge); err != nil {
		t.Fatal(err)
	}
	if ok, err := kubeletPluginRegistered(t.Context(), draRegistration); err != nil || !ok {
		t.Errorf("the bridge is ready, and the kubelet has its DRA driver registered: %v (%v)", ok, err)
		if err := waitDRARegistered(t.Context(), true); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range running {
		if err := n.checkCheckpoint(p); err != nil {
			t.Errorf("pod %s after the bridge's restart: %v", p.Name, err)
		}
		if err := checkClaimSpec(p.Claim.UID, p.RequestIDs); err != nil {
			t.Errorf("pod %s after the bridge's restart: %v", p.Name, err)
		}
	}
	e := n.RunClaimPod(t, "after-bridge-restart", oneTerminalTpl, nil, 1)
	n.CheckStillRunning(t, pods(running)...)
	time.Sleep(time.Until(stopped.Add(kubeletWipingDelay + 5*time.Second)))
	events, whole := sw.Stop()
	after, err := n.nodeSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the node's slices over the bridge's restart (stopped at %s, watched %v): %v; UIDs before %v, after %v",
		stopped.Format("15:04:05.000"), time.Since(stopped).Round(time.Second), events, sliceUIDs(before), sliceUIDs(after))
	if !whole {
		t.Errorf("the API server ended the watch of the slices early; it saw %v", events)
	}
	for _, ev := range events {
		if ev.Type == watch.Deleted {
			t.Errorf("a slice was deleted over the bridge's restart: %v", ev)
		}
	}
	if !slices.Equal(sliceUIDs(after), sliceUIDs(before)) {
		t.Errorf("the node's slices are %v after the bridge's restart, %v before it", sliceUIDs(after), sliceUIDs(before))
	}
	n.DeleteClaimPod(t, running[0])
	n.DeleteClaimPod(t, e)
}

// republishBound bounds the time from the kubelet's deletion of the
// node's slices to the bridge's publishing them again: about a second
// (bridge/dra.SliceSyncDelay) plus the API's round trips, with room for a
// loaded machine; 54 s with the DRA library's defaults.
const republishBound = 10 * time.Second

// republishGap is the time from the first slice deleted to the first
// slice added after it, among events.
func republishGap(events []sliceEvent) (time.Duration, bool) {
	var deleted time.Time
	for _, e := range events {
		switch {
		case e.Type == watch.Deleted && deleted.IsZero():
			deleted = e.At
		case e.Type == watch.Added && !deleted.IsZero():
			return e.At.Sub(deleted), true
		}
	}
	return 0, false
}

func pods(ps []*ClaimPod) []*Pod {
	out := make([]*Pod, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Pod)
	}
	return out
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

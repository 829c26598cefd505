package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDRAMove moves the terminals' pool between the front ends under
// running pods, both ways, restarting the bridge with another
// --dra-pools, and checks that no terminal is handed out twice.
//
// From the device plugins to DRA: a pod holds two terminals by the
// device plugins' resource; the bridge restarted with the pool in
// --dra-pools keeps the pod's slots in the plugin and publishes only the
// two free terminals; a claim of two gets those, a third claim waits, and
// once the pod is gone its terminals are released (reclaim's grace) and
// published, and the waiting claim's pod runs on one of them.
//
// From DRA to the device plugins (the cameras stay with DRA, so that the
// kubelet can still unprepare the moved claims): the claims' terminals
// are not offered to the device plugins, the one free terminal is; once a
// claim's pod is gone its terminals are offered again, and a pod asking
// for two by the device plugins' resource gets them.
func TestDRAMove(t *testing.T) {
	n := StartDRANode(t, requireNode(t).Sub("dra-move"), false)
	tty := domain + "/" + draPool
	dp := n.RunPod(t, "dp-two", map[string]int64{tty: 2})
	dpIDs := slotDevices(dp.Slots)
	// The bridge is restarted here, not in a subtest: it must outlive
	// them, until the pods with claims are gone.
	n.restartBridge(t, draPool)
	var dra, waited *ClaimPod
	if !t.Run("device plugins to DRA", func(t *testing.T) {
		dra, waited = testMoveToDRA(t, n, dp, dpIDs)
	}) {
		t.Fatal("not moving back: the claims above did not run")
	}
	n.restartBridge(t, "camera-endpoint")
	t.Run("DRA to device plugins", func(t *testing.T) {
		testMoveFromDRA(t, n, dra, waited)
	})
}

// testMoveToDRA checks the node after the bridge restarted with the
// terminals in --dra-pools under device-plugin pod dp, which holds the
// terminals dpIDs, and returns the claim pods it runs.
func testMoveToDRA(t *testing.T, n *DRANode, dp *Pod, dpIDs []string) (dra, waited *ClaimPod) {
	published, err := n.waitSlices(t.Context(), ttysOffered-len(dpIDs), slicesWait)
	if err != nil {
		t.Fatal(err)
	}
	if ids := slices.Collect(maps.Values(poolDevices(published))); overlap(ids, dpIDs) {
		t.Errorf("the slices offer %v, of which the device plugins' pod holds some (%v)", ids, dpIDs)
	}
	n.CheckStillRunning(t, dp)
	dra = n.RunClaimPod(t, "dra-two", twoTerminals, nil, 2)
	if overlap(dra.IDs, dpIDs) {
		t.Errorf("claim pod %s got %v, and device-plugin pod %s holds %v", dra.Name, dra.IDs, dp.Name, dpIDs)
	}
	n.CreatePod(t, n.ClaimPodSpec(t, "dra-waits", oneTerminalTpl, nil))
	if err := n.waitUnschedulable(t.Context(), "dra-waits"); err != nil {
		t.Fatal(err)
	}
	n.DeletePod(t, dp.Name)
	waited = n.AwaitClaimPod(t, "dra-waits", 1)
	if !overlap(waited.IDs, dpIDs) {
		t.Errorf("the waiting claim got %v, want one of the deleted pod's %v", waited.IDs, dpIDs)
	}
	return dra, waited
}

// testMoveFromDRA checks the node after the bridge restarted with the
// terminals no longer in --dra-pools under claim pods dra and waited.
func testMoveFromDRA(t *testing.T, n *DRANode, dra, waited *ClaimPod) {
	tty := domain + "/" + draPool
	held := append(slices.Clone(dra.IDs), waited.IDs...)
	if err := n.waitFreeExactly(t.Context(), tty, ttysOffered-len(held)); err != nil {
		t.Fatal(err)
	}
	n.CheckStillRunning(t, dra.Pod, waited.Pod)
	one := n.RunPod(t, "dp-one", map[string]int64{tty: 1})
	if ids := slotDevices(one.Slots); overlap(ids, held) {
		t.Errorf("device-plugin pod %s got %v, and the claims hold %v", one.Name, ids, held)
	}
	n.DeletePod(t, dra.Name)
	again := n.RunPod(t, "dp-two-again", map[string]int64{tty: 2})
	if ids := slotDevices(again.Slots); !sameSet(ids, dra.IDs) {
		t.Errorf("device-plugin pod %s got %v, want the deleted claim's %v", again.Name, ids, dra.IDs)
	}
}

// restartBridge stops the bridge and starts it again serving pools (a
// --dra-pools; none: every pool by the device plugins), and waits until
// it is ready and, with pools, its DRA driver registered. The bridge runs
// until t ends, once t's pods are gone.
func (n *DRANode) restartBridge(t *testing.T, pools string) {
	t.Helper()
	n.StopBridge(t)
	extra := map[string]string{"dra-checkpoint": n.Checkpoint}
	if pools != "" {
		extra["dra-pools"] = pools
	}
	n.Bridge = StartBridge(t, n.Layout, n.Cluster, Name, n.ConfDir, extra)
	// Before the bridge stops (cleanups run last first): the kubelet
	// deletes a pod with a claim only once the bridge unprepared it.
	t.Cleanup(func() { n.deleteAllPods(t) })
	if pools != "" {
		if err := waitDRARegistered(t.Context(), true); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFreeExactly waits until the kubelet has exactly count devices of
// resource free, and still has after a few of reclaim's periods: a
// device another front end's allocation holds is not offered.
func (n *DRANode) waitFreeExactly(ctx context.Context, resource string, count int) error {
	ctx, cancel := context.WithTimeout(ctx, freeWait)
	defer cancel()
	var free []string
	var err error
	var since time.Time
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		free, err = freeDevices(ctx, n.PodResources, resource)
		switch {
		case err != nil || len(free) != count:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) > 5*reclaimPeriod:
			return nil
		}
	}
	return fmt.Errorf("%s: %d devices free wanted within %v, and kept; last seen %v (%v)", resource, count, freeWait, free, err)
}

// waitUnschedulable waits until the scheduler gives up on pod name for
// now: no device is free for its claim.
func (n *DRANode) waitUnschedulable(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, podStartWait)
	defer cancel()
	var pod *corev1.Pod
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		p, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		pod = p
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return nil
			}
		}
		if p.Spec.NodeName != "" {
			return fmt.Errorf("pod %s was scheduled, with no terminal free:\n%s", name, describePod(n.Cluster.Client, p))
		}
	}
	return fmt.Errorf("pod %s not unschedulable within %v: %+v", name, podStartWait, pod)
}

// slotDevices are the inventory ids of the slots' devices.
func slotDevices(slots []Slot) []string {
	var out []string
	for _, s := range slots {
		out = append(out, s.Instance.DeviceID)
	}
	return out
}

func overlap(a, b []string) bool {
	return slices.ContainsFunc(a, func(x string) bool { return slices.Contains(b, x) })
}

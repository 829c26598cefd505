package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestNode runs pods that ask for the bridge's devices on a real node,
// then deletes one and restarts the kubelet and the bridge under the
// others, and unplugs a device from under a pod. Each step's pod must see
// exactly what the plugins' ADDs gave its slots.
func TestNode(t *testing.T) {
	n := StartNode(t, requireNode(t))
	ttys := n.Instances(t, "tty")
	var a, b, c *Pod
	okA := t.Run("one Instance-level tty", func(t *testing.T) {
		a = n.RunPod(t, "tty-instance", map[string]int64{ttys[0].Resource(): 1})
	})
	okB := t.Run("two ttys of the pool", func(t *testing.T) {
		b = n.RunPod(t, "tty-pool", map[string]int64{n.Pool("tty"): 2})
	})
	okC := t.Run("two cameras of the pool", func(t *testing.T) {
		c = n.RunPod(t, "cameras", map[string]int64{n.Pool("camera"): 2})
	})
	if !okA || !okB || !okC {
		t.Fatal("not checking reclaim and restarts: they need the pods above running")
	}
	running := []*Pod{b, c}
	t.Run("a deleted pod's slot is reclaimed for a new pod", func(t *testing.T) {
		running = append(running, testReclaim(t, n, a))
	})
	t.Run("kubelet restart", func(t *testing.T) {
		running = append(running, testKubeletRestart(t, n, running))
	})
	t.Run("bridge restart", func(t *testing.T) {
		testBridgeRestart(t, n, running)
	})
	t.Run("a removed device is Unhealthy in its pod's status, and Healthy when back", func(t *testing.T) {
		testDeviceHealth(t, n)
	})
}

// reclaimWait bounds the wait for a deleted pod's slot to be released.
const reclaimWait = reclaimGrace + 30*time.Second

// testReclaim deletes pod a, whose Instance-level slot only slot reclaim
// can free, waits until the Instance records it free and runs a pod that
// needs it: two of the pool's ttys when one other is free.
func testReclaim(t *testing.T, n *Node, a *Pod) *Pod {
	slot := a.Slots[0]
	deleted := time.Now()
	n.DeletePod(t, a.Name)
	if err := waitSlotFree(t.Context(), n, slot); err != nil {
		t.Fatal(err)
	}
	t.Logf("slot %s released %v after the pod's deletion (reclaim grace %v)", slot.ID, time.Since(deleted).Round(time.Millisecond), reclaimGrace)
	d := n.RunPod(t, "tty-reclaimed", map[string]int64{n.Pool("tty"): 2})
	if !slices.ContainsFunc(d.Slots, func(s Slot) bool { return s.Instance.Name == slot.Instance.Name }) {
		t.Errorf("pod %s got %v, none of them %s's reclaimed device %s", d.Name, d.Slots, a.Name, slot.Instance.DeviceID)
	}
	return d
}

// waitSlotFree waits until the slot's Instance records it free.
func waitSlotFree(ctx context.Context, n *Node, slot Slot) error {
	ctx, cancel := context.WithTimeout(ctx, reclaimWait)
	defer cancel()
	var last string
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		all, err := listInstances(ctx, n.Cluster.Dynamic, n.Cluster.Namespace)
		if err != nil {
			last = err.Error()
			continue
		}
		for _, i := range all {
			if i.Name == slot.Instance.Name {
				if i.Usage[slot.ID] == "" {
					return nil
				}
				last = fmt.Sprintf("usage %v", i.Usage)
			}
		}
	}
	return fmt.Errorf("slot %s of %s not released within %v of its pod's deletion: %s", slot.ID, slot.Instance.Name, reclaimWait, last)
}

// testKubeletRestart restarts the kubelet: the running pods keep their
// containers, and a new pod gets a camera of the pool once the bridge has
// registered with the new kubelet.
func testKubeletRestart(t *testing.T, n *Node, running []*Pod) *Pod {
	restarted := time.Now()
	if err := n.Kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := WaitNodeReady(t.Context(), n.Cluster.Client, Name, n.Kubelet, restarted); err != nil {
		t.Fatal(err)
	}
	e := n.RunPod(t, "after-kubelet-restart", map[string]int64{n.Pool("camera"): 1})
	n.CheckStillRunning(t, running...)
	return e
}

// testBridgeRestart restarts the bridge: the running pods keep their
// containers, and a new pod gets the last free camera slot through that
// camera's Instance-level resource.
func testBridgeRestart(t *testing.T, n *Node, running []*Pod) {
	if err := n.Bridge.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := waitBridgeReady(t.Context(), n.Bridge); err != nil {
		t.Fatal(err)
	}
	cams := n.Instances(t, "camera")
	i := slices.IndexFunc(cams, func(i Instance) bool { return i.FreeSlots() > 0 })
	if i < 0 {
		t.Fatalf("no camera Instance has a free slot: %v", cams)
	}
	n.RunPod(t, "after-bridge-restart", map[string]int64{cams[i].Resource(): 1})
	n.CheckStillRunning(t, running...)
}

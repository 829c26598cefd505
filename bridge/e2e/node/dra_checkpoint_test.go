package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDRACheckpoint loses the bridge's DRA checkpoint under running pods
// on a real node, cut short and then deleted, each while the bridge is
// stopped and a pod with a claim is deleted meanwhile. The checkpoint is a
// cache: the bridge starts and is ready, the running pod keeps its
// container and its terminals (the plugin still holds its claim's ADDs,
// the checkpoint records it again), the deleted pod's claim is unprepared
// when the kubelet asks, and the next claim is given free terminals, never
// one the running pod holds. The cut checkpoint is kept beside, and a
// Warning Event of the Node says so.
func TestDRACheckpoint(t *testing.T) {
	n := StartDRANode(t, requireNode(t).Sub("dra-checkpoint"), true)
	running := n.RunClaimPod(t, "keeps-two", twoTerminals, nil, 2)
	for _, tc := range []struct {
		name string
		lose func(path string) error
	}{
		{"cut short", func(path string) error {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(path, data[:len(data)/2], 0o600)
		}},
		{"deleted", os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone := n.RunClaimPod(t, "gone-"+tc.name[:3], oneTerminalTpl, nil, 1)
			n.StopBridge(t)
			if err := tc.lose(n.Checkpoint); err != nil {
				t.Fatal(err)
			}
			// The kubelet cannot unprepare the claim while the bridge is
			// down: the pod waits, and goes once the bridge is back.
			if err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Delete(t.Context(), gone.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := n.Bridge.Start(); err != nil {
				t.Fatal(err)
			}
			if err := waitBridgeReady(t.Context(), n.Bridge); err != nil {
				t.Fatal(err)
			}
			n.CheckStillRunning(t, running.Pod)
			if err := n.checkPrepared(t.Context(), running, 2); err != nil {
				t.Errorf("the running pod's claim after the bridge's restart: %v", err)
			}
			if err := n.waitUnprepared(t.Context(), gone); err != nil {
				t.Error(err)
			}
			next := n.RunClaimPod(t, "next-"+tc.name[:3], twoTerminals, nil, 2)
			for _, id := range next.IDs {
				if slices.Contains(running.IDs, id) {
					t.Errorf("pod %s was given %s, which running pod %s holds (%v)", next.Name, id, running.Name, running.IDs)
				}
			}
			n.DeleteClaimPod(t, next)
		})
	}
	t.Run("the cut checkpoint is kept, and said", func(t *testing.T) {
		kept, err := filepath.Glob(n.Checkpoint + ".unreadable-*")
		if err != nil || len(kept) != 1 {
			t.Errorf("checkpoints set aside: %v (%v), want the cut one", kept, err)
		}
		if err := n.checkSetAsideEvent(t); err != nil {
			t.Error(err)
		}
	})
	n.DeleteClaimPod(t, running)
}

// checkSetAsideEvent checks that a Warning Event of the Node says the
// checkpoint was set aside.
func (n *DRANode) checkSetAsideEvent(t *testing.T) error {
	l, err := n.Cluster.Client.EventsV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, e := range l.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == Name && e.Reason == "DRACheckpointSetAside" && e.Type == "Warning" {
			t.Logf("the Node's event: %s", e.Note)
			return nil
		}
	}
	return fmt.Errorf("no Warning Event of node %s says its checkpoint was set aside (%d events in default)", Name, len(l.Items))
}

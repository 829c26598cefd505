package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The kubelet's event for a pod whose claims it could not prepare
// (k8s.io/kubernetes/pkg/kubelet/events.FailedPrepareDynamicResources).
const failedPrepare = "FailedPrepareDynamicResources"

// retryWait bounds the wait for a pod whose claims the kubelet failed to
// prepare, once they can be. On its own the kubelet tries again at its
// next sync of the pod, about a minute later (its resync: a failed
// Prepare does not count as a failed sync; 1.37: 60 to 90 s seen), and
// upstream's tests allow five. The test does not wait for that: it
// annotates the pod (nudge), as an operator would, and the kubelet syncs
// a pod at once when the pod changes. The bound still covers the
// kubelet's own next try.
const retryWait = 3 * time.Minute

// TestDRAUpstream holds the bridge to the checks that upstream's DRA
// node tests (test/e2e_node/dra_test.go, and test/e2e/dra for the last
// two) make of their own test driver, which cannot be pointed at another
// driver: a pod created while the kubelet is down runs once it is back;
// a Prepare that fails keeps the pod pending, with the kubelet's event,
// and the pod runs once Prepare succeeds; a pod deleted while the
// kubelet is down is unprepared once it is back; a force-deleted pod's
// claim is unprepared; a new claim of the same name as one not yet
// unprepared, another UID, waits for that Unprepare. TestDRA has the
// others: the kubelet's and the bridge's restarts. The failures are the
// plugin's own, through the gated terminals' plugin (Gate).
func TestDRAUpstream(t *testing.T) {
	n := StartDRANode(t, requireNode(t).Sub("dra-upstream"), true)
	g := n.GateTerminals(t)
	t.Run("a pod created while the kubelet is down runs", func(t *testing.T) {
		testCreatedWhileKubeletDown(t, n)
	})
	t.Run("a failed Prepare keeps the pod pending, with an event, until Prepare succeeds", func(t *testing.T) {
		testPrepareFails(t, n, g)
	})
	t.Run("a pod deleted while the kubelet is down is unprepared", func(t *testing.T) {
		testDeletedWhileKubeletDown(t, n)
	})
	t.Run("a force-deleted pod's claim is unprepared", func(t *testing.T) {
		p := n.RunClaimPod(t, "force-deleted", oneTerminalTpl, nil, 1)
		forceDelete(t, n, p.Name)
		if err := n.waitUnprepared(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a new claim of an old one's name waits for the old one's Unprepare", func(t *testing.T) {
		testSameNameWaits(t, n, g)
	})
	t.Run("a restart whose repeated Prepare fails keeps a running pod's device", func(t *testing.T) {
		testRepeatedPrepareFails(t, n, g)
	})
	t.Run("a claim only an init container uses stays prepared, and its pod runs again after its sandbox dies", func(t *testing.T) {
		testInitContainerClaim(t, n)
	})
}

// testRepeatedPrepareFails restarts the kubelet, then the bridge, under
// a running pod while the plugin's ADD fails. The kubelet prepares a
// running pod's claims again only when it makes the pod's sandbox anew
// (it does not checkpoint that a claim is prepared); the bridge's
// rebuild prepares the claim the kubelet names again, and its ADD fails
// once. The pod's device stays held: the plugin still lists the claim's
// request-id, the checkpoint still records it, the pod keeps running;
// once ADD works, deleting the pod unprepares the claim.
func testRepeatedPrepareFails(t *testing.T, n *DRANode, g *Gate) {
	p := n.RunClaimPod(t, "repeat-fails", oneTerminalTpl, nil, 1)
	stopKubelet(t, n)
	g.Set(t, failAdd, true)
	restartKubelet(t, n)
	n.StopBridge(t)
	seen := len(g.Calls())
	if err := n.Bridge.Start(); err != nil {
		t.Fatal(err)
	}
	err := g.waitCallSince(t.Context(), seen, "ADD", time.Minute)
	g.Set(t, failAdd, false)
	if err != nil {
		t.Fatalf("the restarted bridge did not prepare the running pod's claim again: %v", err)
	}
	if err := waitDRARegistered(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	allocs, err := pluginAllocations(ctx, n.ConfDir, n.PluginDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range p.RequestIDs {
		if _, ok := allocs[id]; !ok {
			t.Errorf("after the failed repeat the plugin no longer holds %s, which running pod %s has", id, p.Name)
		}
	}
	if err := n.checkCheckpoint(p); err != nil {
		t.Errorf("after the failed repeat: %v", err)
	}
	n.CheckStillRunning(t, p.Pod)
	n.DeleteClaimPod(t, p)
}

// stopKubelet stops the kubelet; restartKubelet starts it again and
// waits until the Node is Ready and the kubelet has the bridge's driver
// registered again.
func stopKubelet(t *testing.T, n *DRANode) {
	t.Helper()
	if err := n.Kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
}

func restartKubelet(t *testing.T, n *DRANode) {
	t.Helper()
	started := time.Now()
	if err := n.Kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	if err := WaitNodeReady(t.Context(), n.Cluster.Client, Name, n.Kubelet, started); err != nil {
		t.Fatal(err)
	}
	if err := waitDRARegistered(t.Context(), true); err != nil {
		t.Fatal(err)
	}
}

// testCreatedWhileKubeletDown: the scheduler places the pod and
// allocates its claim while the kubelet is down (the Node is still
// Ready: the node lifecycle controller waits out its grace period);
// once the kubelet is back, the bridge prepares the claim and the pod
// runs.
func testCreatedWhileKubeletDown(t *testing.T, n *DRANode) {
	stopKubelet(t, n)
	n.CreatePod(t, n.ClaimPodSpec(t, "while-kubelet-down", oneTerminalTpl, nil))
	if err := waitScheduled(t.Context(), n, "while-kubelet-down"); err != nil {
		t.Fatal(err)
	}
	restartKubelet(t, n)
	n.DeleteClaimPod(t, n.AwaitClaimPod(t, "while-kubelet-down", 1))
}

// waitScheduled waits until the scheduler has bound the pod.
func waitScheduled(ctx context.Context, n *DRANode, name string) error {
	ctx, cancel := context.WithTimeout(ctx, podStartWait)
	defer cancel()
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		p, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Spec.NodeName != "" {
			return nil
		}
	}
	return fmt.Errorf("pod %s not scheduled within %v", name, podStartWait)
}

// testPrepareFails: the plugin's ADD fails, as it does for a device held
// outside the bridge. The pod stays pending with the kubelet's event,
// the failed Prepare leaves nothing prepared (all or nothing: no ADD
// kept, nothing in the checkpoint), and once ADD succeeds again the
// kubelet's retry prepares the claim and the pod runs.
func testPrepareFails(t *testing.T, n *DRANode, g *Gate) {
	const name = "prepare-fails"
	g.Set(t, failAdd, true)
	n.CreatePod(t, n.ClaimPodSpec(t, name, oneTerminalTpl, nil))
	ev, err := waitPodEvent(t.Context(), n, name, failedPrepare)
	if err != nil {
		g.Set(t, failAdd, false)
		t.Fatal(err)
	}
	t.Logf("the kubelet's event: %s", ev.Message)
	pod, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodPending || running(pod) {
		t.Errorf("with its Prepare failing, pod %s is %s:\n%s", name, pod.Status.Phase, describePod(n.Cluster.Client, pod))
	}
	claim, err := n.podClaim(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	failed := &ClaimPod{Pod: &Pod{Name: name}, Claim: claim, RequestIDs: []string{string(claim.UID) + "-0"}}
	if left := n.preparedLeft(t.Context(), failed); len(left) > 0 {
		t.Errorf("a Prepare that failed left: %s", strings.Join(left, "; "))
	}
	g.Set(t, failAdd, false)
	opened := time.Now()
	n.nudge(t, name)
	p := n.awaitClaimPodWithin(t, name, 1, retryWait)
	t.Logf("pod %s runs %v after its claim's ADD could succeed, the pod annotated then", name, time.Since(opened).Round(time.Millisecond))
	n.DeleteClaimPod(t, p)
}

// nudge annotates the pod, as an operator would (kubectl annotate): the
// kubelet syncs a pod when it changes, and so tries again at once to
// prepare the claims of a pod whose Prepare failed, rather than at its
// resync a minute later (retryWait).
func (n *DRANode) nudge(t *testing.T, pod string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.cdi.local/nudged":%q}}}`, time.Now().Format(time.RFC3339Nano))
	_, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Patch(t.Context(), pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// testDeletedWhileKubeletDown: a running pod is deleted while the
// kubelet is down; once it is back, the kubelet stops the container and
// has the bridge unprepare the claim, and the pod goes.
func testDeletedWhileKubeletDown(t *testing.T, n *DRANode) {
	p := n.RunClaimPod(t, "deleted-while-kubelet-down", oneTerminalTpl, nil, 1)
	stopKubelet(t, n)
	if err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restartKubelet(t, n)
	n.DeleteClaimPod(t, p)
}

// forceDelete deletes the pod at once (grace period 0): the API server
// forgets it before the kubelet has stopped anything.
func forceDelete(t *testing.T, n *DRANode, name string) {
	t.Helper()
	err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// testSameNameWaits (upstream's "blocks new pod after force-delete"): a
// pod and its claim, of a name of the test's, are force-deleted while the
// claim's Unprepare fails (the plugin's DEL does); a new claim of the same
// name, another UID, and a new pod of it are created. The new pod waits,
// with the kubelet's event, and nothing of the new claim is prepared,
// until the old claim is unprepared; then it runs.
func testSameNameWaits(t *testing.T, n *DRANode, g *Gate) {
	const claimName = "same-name"
	old := n.runNamedClaimPod(t, "old-claim-holder", claimName)
	g.Set(t, failDel, true)
	mark := len(g.Calls())
	forceDelete(t, n, old.Name)
	if err := deleteClaim(t.Context(), n, claimName); err != nil {
		g.Set(t, failDel, false)
		t.Fatal(err)
	}
	if left := n.preparedLeft(t.Context(), old); len(left) == 0 {
		t.Errorf("the old claim %s was unprepared while its DEL failed", old.Claim.UID)
	}
	n.createNamedClaimPod(t, "new-claim-holder", claimName)
	ev, err := waitPodEvent(t.Context(), n, "new-claim-holder", failedPrepare)
	if err != nil {
		g.Set(t, failDel, false)
		t.Fatal(err)
	}
	t.Logf("the kubelet's event: %s", ev.Message)
	// The kubelet unprepares the old claim at the old pod's own sync,
	// which may come after the new pod's event: wait for its DEL.
	if err := g.waitCallSince(t.Context(), mark, "DEL", eventWait); err != nil {
		t.Errorf("the old claim's DEL was not tried: %v", err)
	}
	calls := g.Calls()[mark:]
	t.Logf("the plugin's commands since the old claim's DEL fails: %v", calls)
	if slices.Contains(calls, "ADD") {
		t.Errorf("the plugin ran ADD while the old claim's DEL failed: %v", calls)
	}
	g.Set(t, failDel, false)
	// The kubelet retries the old claim's Unprepare on its own (a failed
	// sync of a pod that is going); the new pod waits for its next sync.
	opened := time.Now()
	if err := n.waitUnprepared(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	n.nudge(t, "new-claim-holder")
	p := n.awaitClaimPodWithin(t, "new-claim-holder", 1, retryWait)
	t.Logf("the new pod runs %v after the old claim's DEL could succeed, the pod annotated once it had", time.Since(opened).Round(time.Millisecond))
	if p.Claim.UID == old.Claim.UID {
		t.Fatalf("the new pod runs with the old claim %s", old.Claim.UID)
	}
	if left := n.preparedLeft(t.Context(), old); len(left) > 0 {
		t.Errorf("the new pod runs, and of the old claim there is left: %s", strings.Join(left, "; "))
	}
	n.DeleteClaimPod(t, p)
}

// runNamedClaimPod runs a pod with a claim of its own, named claimName,
// for one terminal, and checks it as RunClaimPod does.
func (n *DRANode) runNamedClaimPod(t *testing.T, name, claimName string) *ClaimPod {
	t.Helper()
	n.createNamedClaimPod(t, name, claimName)
	return n.AwaitClaimPod(t, name, 1)
}

// createNamedClaimPod creates a claim named claimName for one terminal and
// a pod that names it.
func (n *DRANode) createNamedClaimPod(t *testing.T, name, claimName string) {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName}, Spec: oneTerminal().Spec.Spec}
	if _, err := n.Cluster.Client.ResourceV1().ResourceClaims(PodNamespace).Create(t.Context(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := n.ClaimPodSpec(t, name, "", nil)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: ptr.To(claimName)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "devices"}}
	n.CreatePod(t, pod)
}

// deleteClaim deletes the claim and waits until it is gone: the claim
// controller lifts its finalizer once no pod holds it.
func deleteClaim(ctx context.Context, n *DRANode, name string) error {
	api := n.Cluster.Client.ResourceV1().ResourceClaims(PodNamespace)
	if err := api.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, podDeleteWait)
	defer cancel()
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		if _, err := api.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
	}
	return fmt.Errorf("claim %s still there %v after its deletion", name, podDeleteWait)
}

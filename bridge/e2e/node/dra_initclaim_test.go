package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testInitContainerClaim runs a pod whose claim only its init container
// uses. The kubelet's PodResources List leaves out init containers that
// are not restartable sidecars, so it never names the claim; the bridge
// keeps it past --reclaim-grace (3 s here) all the same, since the pod,
// read from the API server, names it and is reserved it. Released, the
// claim's ADD, record and CDI spec would be gone while the pod runs, and
// the kubelet, which takes the claim for prepared, would never prepare
// it again: when the pod's sandbox dies (here: killed), the kubelet
// makes it anew and runs the init container again, which could not be
// created, its CDI device unresolvable. It runs.
func testInitContainerClaim(t *testing.T, n *DRANode) {
	ctx := t.Context()
	const name = "init-claim"
	pod := n.ClaimPodSpec(t, name, oneTerminalTpl, nil)
	init := *pod.Spec.Containers[0].DeepCopy()
	init.Name, init.Args = "load-firmware", []string{"report-once", "/report"}
	pod.Spec.InitContainers = []corev1.Container{init}
	pod.Spec.Containers[0].Resources.Claims = nil
	pod.Spec.Containers[0].Args = []string{"sleep"}
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways // a Deployment's pod
	n.CreatePod(t, pod)
	running, err := waitRunningWithin(ctx, n.Cluster.Client, name, podStartWait)
	if err != nil {
		t.Fatal(err)
	}
	p := &ClaimPod{Pod: &Pod{Name: name}}
	p.ContainerID, p.StartedAt = containerState(running)
	if p.Claim, err = n.podClaim(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := n.checkPrepared(ctx, p, 1); err != nil {
		t.Fatalf("as the pod started: %v", err)
	}
	time.Sleep(3*reclaimGrace + 3*reclaimPeriod)
	n.CheckStillRunning(t, p.Pod)
	if err := n.checkPrepared(ctx, p, 1); err != nil {
		t.Errorf("%v after the pod started, its claim %s is no longer prepared: %v", 3*reclaimGrace+3*reclaimPeriod, p.Claim.UID, err)
	}

	// The sandbox dies; the kubelet makes it anew and runs the init
	// container again.
	if err := killSandbox(ctx, n, name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for ; time.Now().Before(deadline); time.Sleep(pollInterval) {
		got, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := containerState(got); id != "" && id != p.ContainerID {
			t.Logf("the pod runs again, container %s", id)
			n.DeleteClaimPod(t, p)
			return
		}
	}
	got, _ := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(ctx, name, metav1.GetOptions{})
	t.Errorf("a minute after its sandbox died, the pod does not run again:\n%s", describePod(n.Cluster.Client, got))
	n.DeleteClaimPod(t, p)
}

// killSandbox kills the sandbox (pause) task of pod name in containerd.
func killSandbox(ctx context.Context, n *DRANode, name string) error {
	out, err := n.Containerd.Ctr(ctx, "containers", "ls", "-q",
		`labels."io.kubernetes.pod.name"==`+name+`,labels."io.cri-containerd.kind"==sandbox`)
	if err != nil {
		return fmt.Errorf("listing the sandbox: %w: %s", err, out)
	}
	var ids []string // the output's warnings left out
	for _, f := range strings.Fields(string(out)) {
		if len(f) == 64 && strings.Trim(f, "0123456789abcdef") == "" {
			ids = append(ids, f)
		}
	}
	if len(ids) != 1 {
		return fmt.Errorf("sandboxes of pod %s: %q", name, out)
	}
	if out, err := n.Containerd.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", ids[0]); err != nil {
		return fmt.Errorf("killing sandbox %s: %w: %s", ids[0], err, out)
	}
	return nil
}

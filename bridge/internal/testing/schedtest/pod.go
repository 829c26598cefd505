package schedtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// PodWait bounds WaitPod.
const PodWait = 2 * time.Minute

// WaitPod waits until done says yes of pod name, what saying what for
// the failure's message, and returns the pod as done saw it.
func (c *Cluster) WaitPod(t testing.TB, name, what string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, PodWait, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return done(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s: %s: %v; last seen %+v", name, what, err, pod)
	}
	return pod
}

// Unschedulable is whether the scheduler gave up on the pod for now.
func Unschedulable(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// AllocatedClaim is the claim of a scheduled pod's first resource claim,
// which must be allocated.
func (c *Cluster) AllocatedClaim(t testing.TB, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	claim, err := c.Client.ResourceV1().ResourceClaims(c.Namespace).Get(t.Context(), *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil {
		t.Fatalf("claim of pod %s: %+v, %v", pod.Name, claim, err)
	}
	return claim
}

// Selects is the hostnames a shared device's node selector selects, by
// one term of one kubernetes.io/hostname In requirement
// (dradevices.NodesSelector), or what else it has.
func Selects(d resourceapi.Device) string {
	if d.NodeSelector == nil || len(d.NodeSelector.NodeSelectorTerms) != 1 {
		return fmt.Sprintf("%+v", d.NodeSelector)
	}
	term := d.NodeSelector.NodeSelectorTerms[0]
	r := term.MatchExpressions
	if len(term.MatchFields) != 0 || len(r) != 1 || r[0].Key != corev1.LabelHostname || r[0].Operator != corev1.NodeSelectorOpIn {
		return fmt.Sprintf("%+v", d.NodeSelector)
	}
	return fmt.Sprint(r[0].Values)
}

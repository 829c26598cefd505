package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// freedGrace is the bridge's --reclaim-grace in TestFreedAtOnce: far
// longer than the test waits, so that only the pod's end, not the
// grace, can free its slot.
const freedGrace = 10 * time.Minute

// freedWait bounds the wait for a deleted pod's device to be offered
// again: the bridge asks the kubelet every 2 s, then the API server.
// The measured time is logged; the bound only tells the pod's end from
// the grace.
const freedWait = time.Minute

// TestFreedAtOnce deletes a pod that holds a terminal's Instance-level
// slot, which keeps that terminal out of the pool's resource, and waits
// for the terminal to be offered in the pool again (the Node's
// allocatable) and its slot free, with a --reclaim-grace of 10 minutes:
// the bridge sees the pod gone from the kubelet's PodResources and the
// API server confirms it, and releases the slot at once.
func TestFreedAtOnce(t *testing.T) {
	n := StartNodeWith(t, requireNode(t), "cdi-state-freed", map[string]string{"reclaim-grace": freedGrace.String()})
	pool := n.Pool("tty")
	before := n.allocatable(t, pool)
	a := n.RunPod(t, "tty-held", map[string]int64{n.Instances(t, "tty")[0].Resource(): 1})
	if err := n.waitAllocatable(t.Context(), pool, before-1); err != nil {
		t.Fatalf("while pod %s holds its terminal: %v", a.Name, err)
	}
	deleted := time.Now()
	n.DeletePod(t, a.Name)
	gone := time.Since(deleted)
	if err := n.waitAllocatable(t.Context(), pool, before); err != nil {
		t.Fatalf("after pod %s was deleted: %v", a.Name, err)
	}
	back := time.Since(deleted)
	if err := waitSlotFree(t.Context(), n, a.Slots[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("the terminal back in %s %v after the pod's delete (the pod gone after %v), the grace %v",
		pool, back.Round(time.Millisecond), gone.Round(time.Millisecond), freedGrace)
}

// allocatable is the Node's allocatable count of resource.
func (n *Node) allocatable(t testing.TB, resource string) int64 {
	t.Helper()
	node, err := n.Cluster.Client.CoreV1().Nodes().Get(t.Context(), Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return domainResources(node.Status.Allocatable)[resource]
}

// waitAllocatable waits, at most freedWait, until the Node offers want
// of resource.
func (n *Node) waitAllocatable(ctx context.Context, resource string, want int64) error {
	ctx, cancel := context.WithTimeout(ctx, freedWait)
	defer cancel()
	last := "no answer"
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		node, err := n.Cluster.Client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			continue
		}
		got := domainResources(node.Status.Allocatable)[resource]
		if got == want {
			return nil
		}
		last = fmt.Sprintf("%d", got)
	}
	return fmt.Errorf("%s not %d within %v: %s", resource, want, freedWait, last)
}

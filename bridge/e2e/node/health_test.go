package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// healthWait bounds the wait for a device's health to reach its pod's
// status: the bridge reports a vanished device within a second, and the
// kubelet writes the pod's status at its next sync.
const healthWait = time.Minute

// testDeviceHealth runs a pod holding a device of a drop-in whose root is
// the test's own, where the device's node is a copy (mknod) of a real
// terminal's, so that removing it unplugs nothing real. Removed, the
// device must show Unhealthy in the pod's status
// (status.containerStatuses[].allocatedResourcesStatus, which the
// kubelet fills from the device plugin's ListAndWatch: the
// ResourceHealthStatus feature gate, beta and on by default at 1.36);
// put back, Healthy again, with the pod still running on its slot.
func testDeviceHealth(t *testing.T, n *Node) {
	// The highest terminal the node's tty drop-in does not offer.
	terminal, err := ttyReserve()
	if err != nil {
		t.Fatal(err)
	}
	like := "/dev/tty" + strconv.Itoa(terminal)
	root := n.Layout.Path("hotplug-root")
	node := filepath.Join(root, like)
	if err := copyDeviceNode(node, like); err != nil {
		t.Fatal(err)
	}
	d := DropIn{Type: "tty", ID: "hotplug", Plugin: "generic-tty", Args: map[string]any{
		"root": root, "stateDir": n.Layout.Path("cdi-state-hotplug"), "num_system_reserved": terminal - 1}}
	if err := d.Write(n.ConfDir); err != nil {
		t.Fatal(err)
	}
	inst, err := waitInstance(t.Context(), n, d.Pool())
	if err != nil {
		t.Fatal(err)
	}
	// The device's own resource: its slot ids are unique on the node. A
	// pool's virtual device ids are not (every pool counts from 0), and
	// the kubelet finds the pod a health change concerns by the device id
	// alone, so a pool's change may not reach the pod's status promptly
	// (bridge/README.md, "Device health in a pod's status").
	resource := inst.Resource()
	pod := n.RunPod(t, "hotplug", map[string]int64{resource: 1})
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	if err := waitHealth(t.Context(), n, pod.Name, resource, corev1.ResourceHealthStatusUnhealthy); err != nil {
		t.Fatal(err)
	}
	t.Logf("Unhealthy in the pod's status %v after the device node's removal", time.Since(removed).Round(time.Millisecond))
	if err := copyDeviceNode(node, like); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := waitHealth(t.Context(), n, pod.Name, resource, corev1.ResourceHealthStatusHealthy); err != nil {
		t.Fatal(err)
	}
	t.Logf("Healthy again in the pod's status %v after the device node came back", time.Since(back).Round(time.Millisecond))
	n.CheckStillRunning(t, pod)
	for _, s := range pod.Slots {
		if err := checkClaimed(t.Context(), n, s); err != nil {
			t.Error(err)
		}
	}
}

// waitInstance waits until the pool has one Instance, and returns it.
func waitInstance(ctx context.Context, n *Node, pool string) (Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, resourcesWait)
	defer cancel()
	last := "no list"
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		all, err := listInstances(ctx, n.Cluster.Dynamic, n.Cluster.Namespace)
		if err != nil {
			last = err.Error()
			continue
		}
		insts := slices.DeleteFunc(all, func(i Instance) bool { return i.Pool != pool })
		if len(insts) == 1 {
			return insts[0], nil
		}
		last = fmt.Sprintf("%d Instances: %v", len(insts), insts)
	}
	return Instance{}, fmt.Errorf("pool %s: not one Instance within %v; last seen %s", pool, resourcesWait, last)
}

// copyDeviceNode makes a device node at path with the type, mode and
// device number of the node at like.
func copyDeviceNode(path, like string) error {
	var st unix.Stat_t
	if err := unix.Stat(like, &st); err != nil {
		return fmt.Errorf("stat %s: %w", like, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := unix.Mknod(path, st.Mode, int(st.Rdev)); err != nil {
		return fmt.Errorf("mknod %s like %s: %w", path, like, err)
	}
	return nil
}

// waitHealth waits until every device of resource in the pod's container
// status has health want, and says what it last saw when it does not.
func waitHealth(ctx context.Context, n *Node, pod, resource string, want corev1.ResourceHealthStatus) error {
	ctx, cancel := context.WithTimeout(ctx, healthWait)
	defer cancel()
	last := "no status"
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		p, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			continue
		}
		health, ok := resourceHealth(p, resource)
		last = fmt.Sprintf("%v", health)
		if ok && allHealth(health, want) {
			return nil
		}
	}
	return fmt.Errorf("pod %s: %s not %s in allocatedResourcesStatus within %v; last seen %s", pod, resource, want, healthWait, last)
}

// resourceHealth is the health of each device of resource in the pod's
// container status.
func resourceHealth(p *corev1.Pod, resource string) ([]corev1.ResourceHealth, bool) {
	for _, c := range p.Status.ContainerStatuses {
		for _, r := range c.AllocatedResourcesStatus {
			if string(r.Name) == resource {
				return r.Resources, true
			}
		}
	}
	return nil, false
}

func allHealth(hs []corev1.ResourceHealth, want corev1.ResourceHealthStatus) bool {
	for _, h := range hs {
		if h.Health != want {
			return false
		}
	}
	return len(hs) > 0
}

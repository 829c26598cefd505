package node

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cdiexec/cdi/bridge/e2e/node/internal/report"
)

// freeWait bounds the wait for devices to be free in the kubelet: after a
// restart of the kubelet or the bridge, until the bridge registered again;
// after a reclaim, until the pool offers the slot again.
const freeWait = time.Minute

// Pod is a test pod that runs.
type Pod struct {
	Name        string
	ContainerID string
	StartedAt   metav1.Time
	// Slots are what its container holds, from the kubelet's PodResources
	// and the Instances.
	Slots  []Slot
	Report report.Report
}

// WaitFree waits until the kubelet has count devices of resource that no
// container holds, so that a pod asking for them is admitted.
func (n *Node) WaitFree(ctx context.Context, resource string, count int) error {
	ctx, cancel := context.WithTimeout(ctx, freeWait)
	defer cancel()
	var free []string
	var err error
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		free, err = freeDevices(ctx, n.PodResources, resource)
		if err == nil && len(free) >= count {
			return nil
		}
	}
	return fmt.Errorf("%d free devices of %s wanted within %v; last seen %v (%v)", count, resource, freeWait, free, err)
}

// RunPod runs a pod asking for resources, waits until its container runs
// and has reported, and checks that the report shows exactly the device
// nodes, and every variable, that the ADDs of the pod's slots returned.
func (n *Node) RunPod(t testing.TB, name string, resources map[string]int64) *Pod {
	t.Helper()
	ctx := t.Context()
	for r, count := range resources {
		if err := n.WaitFree(ctx, r, int(count)); err != nil {
			t.Fatal(err)
		}
	}
	dir := n.Layout.Path("reports", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := newPod(name, Name, dir, resources)
	if _, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Create(ctx, spec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	running, err := waitRunning(ctx, n.Cluster.Client, name)
	if err != nil {
		t.Fatal(err)
	}
	pod := &Pod{Name: name}
	pod.ContainerID, pod.StartedAt = containerState(running)
	if pod.Report, err = readReport(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if pod.Slots, err = n.podSlots(ctx, name, resources); err != nil {
		t.Fatal(err)
	}
	n.checkReport(t, pod)
	return pod
}

// containerState returns the test container's id and start time.
func containerState(pod *corev1.Pod) (string, metav1.Time) {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == containerName && s.State.Running != nil {
			return s.ContainerID, s.State.Running.StartedAt
		}
	}
	return "", metav1.Time{}
}

// podSlots resolves the devices the kubelet gave the pod to slots, and
// checks their number and that no Configuration-level request got two
// slots of one device (which Allocate must refuse).
func (n *Node) podSlots(ctx context.Context, name string, resources map[string]int64) ([]Slot, error) {
	held, err := heldDevices(ctx, n.PodResources, PodNamespace, name)
	if err != nil {
		return nil, err
	}
	for r, count := range resources {
		if len(held[r]) != int(count) {
			return nil, fmt.Errorf("PodResources: pod %s holds %v of %s, want %d", name, held[r], r, count)
		}
	}
	instances, err := listInstances(ctx, n.Cluster.Dynamic, n.Cluster.Namespace)
	if err != nil {
		return nil, err
	}
	slots, err := resolveSlots(held, instances, Name)
	if err != nil {
		return nil, err
	}
	devices := map[string]bool{}
	for _, s := range slots {
		if s.VDev != "" && devices[s.Instance.Name] {
			return nil, fmt.Errorf("pod %s holds two slots of %s (device %s)", name, s.Instance.Name, s.Instance.DeviceID)
		}
		devices[s.Instance.Name] = true
	}
	return slots, nil
}

// checkReport compares what the container saw with what the plugins'
// ADDs returned for its slots.
func (n *Node) checkReport(t testing.TB, pod *Pod) {
	t.Helper()
	allocs, err := pluginAllocations(t.Context(), n.ConfDir, n.PluginDir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := wantFor(pod.Slots, allocs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range pod.Slots {
		t.Logf("pod %s: slot %s of %s (device %s) vdev %q", pod.Name, s.ID, s.Instance.Name, s.Instance.DeviceID, s.VDev)
	}
	t.Logf("pod %s sees devices %v", pod.Name, pod.Report.Devices)
	for _, k := range slices.Sorted(maps.Keys(want.Env)) {
		t.Logf("pod %s sees %s=%q; its slots set %v", pod.Name, k, pod.Report.Env[k], want.Env[k])
	}
	for _, p := range want.Check(pod.Report) {
		t.Errorf("pod %s: %s", pod.Name, p)
	}
}

// CheckStillRunning checks that each pod's container is the one that ran
// before (same id, same start, no restart) and is still running.
func (n *Node) CheckStillRunning(t testing.TB, pods ...*Pod) {
	t.Helper()
	for _, p := range pods {
		got, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: %v", p.Name, err)
			continue
		}
		id, started := containerState(got)
		if !running(got) || id != p.ContainerID || !started.Equal(&p.StartedAt) {
			t.Errorf("pod %s: container %s started %v, want %s started %v still running:\n%s",
				p.Name, id, started, p.ContainerID, p.StartedAt, describePod(n.Cluster.Client, got))
		}
	}
}

// DeletePod deletes a pod and waits until it is gone.
func (n *Node) DeletePod(t testing.TB, name string) {
	t.Helper()
	if err := deletePod(t.Context(), n.Cluster.Client, PodNamespace, name); err != nil {
		t.Fatal(err)
	}
}

package kubelet

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	_ "unsafe" // for go:linkname

	cadvisorapi "github.com/google/cadvisor/info/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// newManagerImpl is the device manager's own constructor with the
// registration socket as a parameter. The exported NewManagerImpl fixes
// the socket at /var/lib/kubelet/device-plugins/kubelet.sock, which needs
// root and would be shared by every test; the kubelet's own tests call
// this one. The linker does not compare signatures: newManagerSignature
// is checked against the source in TestMain, so that a version bump that
// changes it stops the tests instead of corrupting memory.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

// newManagerSignature is newManagerImpl's declaration in
// pkg/kubelet/cm/devicemanager/manager.go, as linked above.
const newManagerSignature = "func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*ManagerImpl, error) {"

// waitFor bounds every wait for the bridge and the manager to agree.
const waitFor = 90 * time.Second

// kubelet is the part of a kubelet these tests need: the device manager
// on a device-plugin directory and the pods it considers active. The pods
// outlive a restart of the manager, as they outlive a kubelet restart.
type kubelet struct {
	dir string
	m   *devicemanager.ManagerImpl

	mu   sync.Mutex
	pods map[types.UID]*v1.Pod
}

// startKubelet runs a device manager on a new device-plugin directory;
// it is stopped when the test ends.
func startKubelet(t *testing.T) *kubelet {
	t.Helper()
	// Socket paths are limited to 108 bytes: t.TempDir's names are long.
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	dumpKlogOnFailure(t)
	k := &kubelet{dir: dir, pods: map[types.UID]*v1.Pod{}}
	k.start(t)
	return k
}

// dumpKlogOnFailure prints what the device manager logged during the
// test, if it fails.
func dumpKlogOnFailure(t *testing.T) {
	t.Helper()
	fi, err := build.klog.Stat()
	if err != nil {
		t.Fatal(err)
	}
	from := fi.Size()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		klog.Flush()
		out, err := os.ReadFile(build.klog.Name())
		if err != nil || int64(len(out)) < from {
			t.Logf("reading the device manager's log: %v", err)
			return
		}
		out = out[from:]
		const tail = 32 << 10
		if len(out) > tail {
			out = out[len(out)-tail:]
		}
		t.Logf("end of the device manager's log during this test:\n%s", out)
	})
}

// start runs a new device manager on k.dir, as a starting kubelet does:
// it reads the checkpoint and clears the directory's sockets.
func (k *kubelet) start(t *testing.T) {
	t.Helper()
	// Two NUMA nodes, as the fixture's devices name.
	topology := []cadvisorapi.Node{{Id: 0}, {Id: 1}}
	m, err := newManagerImpl(klog.Background(), k.dir+"/kubelet.sock", topology, topologymanager.NewFakeManager(klog.Background()))
	if err != nil {
		t.Fatalf("creating the device manager: %v", err)
	}
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := m.Start(klog.Background(), k.activePods, ready, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		t.Fatalf("starting the device manager: %v", err)
	}
	k.m = m
	t.Cleanup(func() { _ = m.Stop(klog.Background()) })
}

// restart stops the device manager and starts a new one on the same
// directory, as a kubelet restart does.
func (k *kubelet) restart(t *testing.T) {
	t.Helper()
	if err := k.m.Stop(klog.Background()); err != nil {
		t.Fatalf("stopping the device manager: %v", err)
	}
	k.start(t)
}

func (k *kubelet) activePods() []*v1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Collect(maps.Values(k.pods))
}

// admit allocates every container of a new pod through the manager, as
// the kubelet's admission does, and keeps the pod active when it works.
func (k *kubelet) admit(name string, containers ...v1.Container) (*v1.Pod, error) {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = name, "default", types.UID("uid-"+name)
	pod.Spec.Containers = containers
	k.mu.Lock()
	k.pods[pod.UID] = pod
	k.mu.Unlock()
	for i := range containers {
		if err := k.m.Allocate(context.Background(), pod, &pod.Spec.Containers[i], lifecycle.AddOperation); err != nil {
			k.remove(pod)
			return nil, fmt.Errorf("pod %s container %s: %w", name, containers[i].Name, err)
		}
	}
	return pod, nil
}

// remove ends a pod: the manager frees its devices at its next allocation.
func (k *kubelet) remove(pod *v1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.pods, pod.UID)
}

// container is a container limited to the given extended resources.
func container(name string, limits map[string]int64) v1.Container {
	c := v1.Container{Name: name, Resources: v1.ResourceRequirements{Limits: v1.ResourceList{}, Requests: v1.ResourceList{}}}
	for res, n := range limits {
		c.Resources.Limits[v1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
		c.Resources.Requests[v1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return c
}

// devices returns the device ids the manager assigned to a container
// for one resource, sorted.
func (k *kubelet) devices(pod *v1.Pod, container, res string) []string {
	ids := slices.Collect(maps.Keys(k.m.GetDevices(string(pod.UID), container)[res]))
	sort.Strings(ids)
	return ids
}

// counts is one resource's capacity and allocatable as the manager
// reports them.
type counts struct{ capacity, allocatable int64 }

func (c counts) String() string { return fmt.Sprintf("%d/%d", c.capacity, c.allocatable) }

// capacity returns GetCapacity as counts per resource.
func (k *kubelet) capacity() map[string]counts {
	capacity, allocatable, _ := k.m.GetCapacity(klog.Background())
	out := map[string]counts{}
	for name, q := range capacity {
		a := allocatable[name]
		out[string(name)] = counts{capacity: q.Value(), allocatable: a.Value()}
	}
	return out
}

// waitCapacity polls GetCapacity until it reports exactly want: every
// resource in want with its counts, and no other.
func (k *kubelet) waitCapacity(t *testing.T, b *bridge, want map[string]counts) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		diff := capacityDiff(want, k.capacity())
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			b.dumpLog(t)
			t.Fatalf("after %v the manager's capacity (capacity/allocatable) still differs from the expected:\n%s", waitFor, diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// capacityDiff describes how got differs from want, one line per
// resource; "" when they are equal.
func capacityDiff(want, got map[string]counts) string {
	var lines []string
	for res, w := range want {
		g, ok := got[res]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("  %s: missing, want %v", res, w))
		case g != w:
			lines = append(lines, fmt.Sprintf("  %s: got %v, want %v", res, g, w))
		}
	}
	for res, g := range got {
		if _, ok := want[res]; !ok {
			lines = append(lines, fmt.Sprintf("  %s: unexpected, got %v", res, g))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// runOptions returns what the kubelet would hand the runtime for one
// container.
func (k *kubelet) runOptions(t *testing.T, pod *v1.Pod, name string) *devicemanager.DeviceRunContainerOptions {
	t.Helper()
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			opts, err := k.m.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[i])
			if err != nil {
				t.Fatalf("GetDeviceRunContainerOptions(%s/%s): %v", pod.Name, name, err)
			}
			if opts == nil {
				t.Fatalf("GetDeviceRunContainerOptions(%s/%s): the manager has nothing cached", pod.Name, name)
			}
			return opts
		}
	}
	t.Fatalf("pod %s has no container %s", pod.Name, name)
	return nil
}

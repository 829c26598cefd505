package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Name is the node's name: the kubelet's hostname override, and the
// bridge's --node-name.
const Name = "e2e-node"

// resourcesWait bounds the wait for the bridge's resources to show in the
// Node's allocatable, which the kubelet reports every 2 seconds here.
const resourcesWait = time.Minute

// Node is a running node: its control plane, containerd, the kubelet and
// cdi-bridge, as a process (StartNode) or as the DaemonSet's pod
// (StartDaemonSetNode).
type Node struct {
	Layout     Layout
	Cluster    *Cluster
	Containerd *Containerd
	Kubelet    *Proc
	// Bridge is the bridge's process; nil when it runs as a pod.
	Bridge *Proc
	// ConfDir holds the bridge's drop-ins, PluginDir the plugins it runs.
	ConfDir, PluginDir string
	DropIns            []DropIn
	// Offered is how many Instances the pool of each drop-in type must
	// have; Baseline what the Node offered before the test's drop-ins.
	Offered      map[string]int
	Baseline     map[string]int64
	PodResources podresourcesv1.PodResourcesListerClient
}

// StartNode starts everything, in order, and waits until the bridge's
// resources are the Node's. Everything stops when the test ends, the
// test's pods first, while the kubelet is there to stop them.
func StartNode(t *testing.T, l Layout) *Node {
	t.Helper()
	return StartNodeWith(t, l, "cdi-state", nil)
}

// StartNodeWith is StartNode with the plugins' state in the layout's
// directory state, and the bridge's flags extra set beyond
// StartBridge's. A test whose --reclaim-grace is long wants a state of
// its own: the allocations the tests before it left in a shared one are
// kept for the grace (reclaim.Foreign), their devices not offered.
func StartNodeWith(t *testing.T, l Layout, state string, extra map[string]string) *Node {
	t.Helper()
	n := &Node{Layout: l, ConfDir: l.Path("cdi-conf"), PluginDir: l.Bin,
		Offered: map[string]int{"tty": ttysOffered, "camera": len(cameras)}}
	timed(t, "etcd and kube-apiserver", func() { n.Cluster = StartCluster(t, l, Name) })
	n.startKubelet(t)
	var err error
	if n.DropIns, err = WriteDropIns(n.ConfDir, l.Path(state)); err != nil {
		t.Fatal(err)
	}
	timed(t, "cdi-bridge (to ready)", func() { n.Bridge = StartBridge(t, l, n.Cluster, Name, n.ConfDir, extra) })
	timed(t, "the bridge's resources in the Node's allocatable", func() { n.waitResources(t) })
	return n
}

// startKubelet starts containerd and the kubelet, connects to the
// kubelet's PodResources API, and has the test's pods deleted when the
// test ends.
func (n *Node) startKubelet(t testing.TB) {
	t.Helper()
	timed(t, "containerd", func() { n.Containerd = StartContainerd(t, n.Layout) })
	timed(t, "kubelet (to Node Ready)", func() {
		n.Kubelet = StartKubelet(t, n.Layout, n.Cluster.Client, Name, n.Cluster.NodeKubeconfig)
	})
	pr, conn, err := dialPodResources()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n.PodResources = pr
	t.Cleanup(func() { n.deleteAllPods(t) })
}

// timed runs step and logs how long it took.
func timed(t testing.TB, what string, step func()) {
	t.Helper()
	start := time.Now()
	step()
	t.Logf("%s: %v", what, time.Since(start).Round(10*time.Millisecond))
}

// Pool is the Configuration-level resource of the drop-in of typ.
func (n *Node) Pool(typ string) string {
	for _, d := range n.DropIns {
		if d.Type == typ {
			return domain + "/" + d.Pool()
		}
	}
	panic("no drop-in of type " + typ)
}

// Instances returns the Instances of the pool of typ, by name.
func (n *Node) Instances(t testing.TB, typ string) []Instance {
	t.Helper()
	all, err := listInstances(t.Context(), n.Cluster.Dynamic, n.Cluster.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	pool := strings.TrimPrefix(n.Pool(typ), domain+"/")
	return slices.DeleteFunc(all, func(i Instance) bool { return i.Pool != pool })
}

// wantAllocatable is what the Node must offer once the bridge published
// its discovery: the baseline, and each pool one virtual device per
// Instance with a free slot (all of them, before any pod), each Instance
// its slots.
func (n *Node) wantAllocatable(t testing.TB) (map[string]int64, error) {
	want := maps.Clone(n.Baseline)
	if want == nil {
		want = map[string]int64{}
	}
	for typ, count := range n.Offered {
		insts := n.Instances(t, typ)
		if len(insts) != count {
			return nil, fmt.Errorf("%d Instances of pool %s, want %d", len(insts), n.Pool(typ), count)
		}
		want[n.Pool(typ)] = int64(count)
		for _, i := range insts {
			want[i.Resource()] = int64(len(i.Usage))
		}
	}
	return want, nil
}

// waitResources waits until the Node's allocatable has every resource of
// wantAllocatable.
func (n *Node) waitResources(t testing.TB) {
	ctx, cancel := context.WithTimeout(t.Context(), resourcesWait)
	defer cancel()
	var last string
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		want, err := n.wantAllocatable(t)
		if err != nil {
			last = err.Error()
			continue
		}
		node, err := n.Cluster.Client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			continue
		}
		got := domainResources(node.Status.Allocatable)
		if equalCounts(got, want) {
			t.Logf("allocatable: %v", got)
			return
		}
		last = fmt.Sprintf("allocatable %v, want %v", got, want)
	}
	t.Fatalf("the bridge's resources not the Node's within %v: %s", resourcesWait, last)
}

// domainResources are the bridge's resources in a resource list.
func domainResources(list corev1.ResourceList) map[string]int64 {
	out := map[string]int64{}
	for name, q := range list {
		if strings.HasPrefix(string(name), domain+"/") {
			out[string(name)] = q.Value()
		}
	}
	return out
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// deleteAllPods deletes the test's pods and waits for each to go.
func (n *Node) deleteAllPods(t testing.TB) {
	ctx := context.Background() // the test's own is done by now
	pods, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing the pods to delete: %v", err)
		return
	}
	for _, p := range pods.Items {
		if err := deletePod(ctx, n.Cluster.Client, PodNamespace, p.Name); err != nil {
			t.Error(err)
		}
	}
}

package dradevices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
)

const (
	clusterNode = "n"
	ttyClass    = "tty.cdi.local"
	clusterWait = 2 * time.Minute
)

// cluster is a real kube-apiserver, kube-scheduler and
// kube-controller-manager (its resourceclaim controller only), with a
// Node object and no kubelet: the test is the kubelet's side.
type cluster struct{ *schedtest.Cluster }

// startCluster starts the cluster with what the scheduler needs: a Node
// that takes pods and the DeviceClasses of the driver's devices.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	return startClusterWith(t, schedtest.ClaimControllers)
}

// startClusterWith is startCluster with the controller-manager running
// controllers.
func startClusterWith(t *testing.T, controllers string) *cluster {
	t.Helper()
	c := &cluster{schedtest.StartWith(t, func() *apitest.Env { return apitest.Start(t, apitest.Options{}) }, controllers)}
	c.CreateNode(t, clusterNode, map[string]string{corev1.LabelHostname: clusterNode})
	c.CreateExamples(t)
	return c
}

// podWithTerminals creates a pod on the node whose claim, from a
// template of its own, asks for count terminals.
func (c *cluster) podWithTerminals(t *testing.T, name string, count int64) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "ttys", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: ttyClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
		}}}},
	}}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(c.Namespace).Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.podWithClaim(t, name, tmpl.Name)
}

// podWithClaim creates a pod on the node whose claim is made from
// template.
func (c *cluster) podWithClaim(t *testing.T, name, template string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		NodeSelector:   map[string]string{corev1.LabelHostname: clusterNode},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: &template}},
		Containers: []corev1.Container{{Name: "c", Image: "none", Resources: corev1.ResourceRequirements{
			Claims: []corev1.ResourceClaim{{Name: "devices"}}}}},
	}}
	if _, err := c.Client.CoreV1().Pods(c.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// scheduled is whether the scheduler bound the pod to the node.
func scheduled(p *corev1.Pod) bool { return p.Spec.NodeName == clusterNode }

// allocated is the devices allocated to the pod's claim, and the claim.
func (c *cluster) allocated(t *testing.T, pod *corev1.Pod) ([]string, *resourceapi.ResourceClaim) {
	t.Helper()
	claim := c.AllocatedClaim(t, pod)
	var names []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		names = append(names, r.Pool+" "+r.Device)
	}
	sort.Strings(names)
	return names, claim
}

// waitSlices waits until the driver's slices of pool hold devices
// devices, each with the id and resource INFO gave it.
func (c *cluster) waitSlices(t *testing.T, pool, resource string, devices int) {
	t.Helper()
	var seen []resourceapi.Device
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=cdi.local"})
		if err != nil {
			return false, nil
		}
		seen = nil
		for _, s := range l.Items {
			if s.Spec.NodeName != nil && *s.Spec.NodeName == clusterNode && s.Spec.Pool.Name == pool {
				seen = append(seen, s.Spec.Devices...)
			}
		}
		return len(seen) == devices, nil
	})
	if err != nil {
		t.Fatalf("slices: %v; devices %+v, want %d", err, seen, devices)
	}
	for _, d := range seen {
		id, res := d.Attributes[AttrID], d.Attributes[AttrResource]
		if id.StringValue == nil || DeviceName(*id.StringValue) != d.Name || res.StringValue == nil || *res.StringValue != resource {
			t.Errorf("device %s: attributes %+v", d.Name, d.Attributes)
		}
	}
}

// kubeletClient is the kubelet's side of the driver's socket.
func kubeletClient(t *testing.T, pluginDir string) drapbv1.DRAPluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return drapbv1.NewDRAPluginClient(conn)
}

// startDriver runs the kubelet plugin over r's Preparer, r's pools
// published, until the returned stop; its socket is under dir.
func (r *rig) startDriver(t *testing.T, client kubernetes.Interface, dir string) (d *dra.Driver, stop func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "registry"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := dra.Start(ctx, dra.Config{DriverName: "cdi.local", NodeName: clusterNode, Client: client, Devices: r.p,
		PluginDir: filepath.Join(dir, "plugin"), RegistrarDir: filepath.Join(dir, "registry")})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := d.PublishResources(ctx, Resources("cdi.local", clusterNode, r.pools, nil)); err != nil {
		t.Fatal(err)
	}
	return d, func() { cancel(); d.Stop() }
}

// The slices published from a real plugin's INFO reach a real scheduler,
// which allocates a claim from them and refuses one that nothing fits;
// the claim is prepared and unprepared through the driver's socket, by a
// driver restarted in between from its checkpoint.
func TestClusterAllocatesPreparesAndUnprepares(t *testing.T) {
	c := startCluster(t)
	r := newRig(t, 1, withGPUs) // four terminals, one slot each; four GPUs
	dir := kubelettest.SocketDir(t, "dra")
	_, stop := r.startDriver(t, c.Client, dir)
	defer func() { stop() }()
	ctx := t.Context()
	c.waitSlices(t, "n/tty-generic", "tty", 4)
	c.waitSlices(t, "n/gpu-drm", "gpu", 4)

	c.podWithTerminals(t, "two", 2)
	devices, claim := c.allocated(t, c.WaitPod(t, "two", "scheduled", scheduled))
	claimName := claim.Name
	if len(devices) != 2 || !strings.HasPrefix(devices[0], "n/tty-generic ") || !strings.HasPrefix(devices[1], "n/tty-generic ") {
		t.Fatalf("allocation %v, want two terminals of pool n/tty-generic", devices)
	}

	t.Run("refused when nothing fits", func(t *testing.T) {
		c.podWithTerminals(t, "three", 3) // two of four are left
		c.WaitPod(t, "three", "unschedulable", schedtest.Unschedulable)
	})
	t.Run("two GPUs on one NUMA node", func(t *testing.T) {
		// The shipped template; only NUMA node 0 has two GPUs.
		c.podWithClaim(t, "gpus", "two-gpus-one-numa-node")
		got, _ := c.allocated(t, c.WaitPod(t, "gpus", "scheduled", scheduled))
		want := []string{"n/gpu-drm " + DeviceName("0000:03:00.0"), "n/gpu-drm " + DeviceName("0000:41:00.0")}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("allocation %v, want %v", got, want)
		}
		// Two GPUs are left, on node 1 and on none: no pair.
		c.podWithClaim(t, "gpus-again", "two-gpus-one-numa-node")
		c.WaitPod(t, "gpus-again", "unschedulable", schedtest.Unschedulable)
	})

	t.Run("an extended resource, the old way", func(t *testing.T) {
		// The shipped tty-generic.cdi.local class names the device
		// plugins' resource: the node has none, so DRA serves the pod.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: clusterNode},
			Containers: []corev1.Container{{Name: "c", Image: "none", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"cdi.local/tty-generic": resource.MustParse("1")}}}},
		}}
		if _, err := c.Client.CoreV1().Pods(c.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod = c.WaitPod(t, "legacy", "scheduled", scheduled)
		if pod.Status.ExtendedResourceClaimStatus == nil {
			t.Fatalf("pod status %+v: no claim for the extended resource", pod.Status)
		}
		claim, err := c.Client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, pod.Status.ExtendedResourceClaimStatus.ResourceClaimName, metav1.GetOptions{})
		if err != nil || claim.Status.Allocation == nil {
			t.Fatalf("the scheduler's claim: %+v, %v", claim, err)
		}
		if r := claim.Status.Allocation.Devices.Results; len(r) != 1 || r[0].Pool != "n/tty-generic" {
			t.Errorf("allocation %+v, want one terminal of n/tty-generic", r)
		}
	})

	kubelet := kubeletClient(t, filepath.Join(dir, "plugin"))
	ref := []*drapbv1.Claim{{Namespace: c.Namespace, Name: claimName, Uid: string(claim.UID)}}
	prep, err := kubelet.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: ref})
	if err != nil {
		t.Fatal(err)
	}
	got := prep.Claims[string(claim.UID)]
	if got == nil || got.Error != "" || len(got.Devices) != 2 || len(got.Devices[0].CdiDeviceIds) != 1 {
		t.Fatalf("prepare response %v", prep)
	}
	s, ok := r.spec(t, claim.UID)
	if !ok || len(s.Devices) != 2 {
		t.Fatalf("claim spec %+v", s)
	}
	if ids := r.allocations(t); len(ids) != 2 {
		t.Errorf("plugin allocations %v, want the claim's two", ids)
	}

	// The bridge restarts: a new Preparer from the checkpoint file, a new
	// kubelet plugin on the socket.
	stop()
	r.p = r.preparer(t)
	_, stop = r.startDriver(t, c.Client, dir)
	kubelet = kubeletClient(t, filepath.Join(dir, "plugin"))
	unprep, err := kubelet.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: ref})
	if err != nil || unprep.Claims[string(claim.UID)] == nil || unprep.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("unprepare after the restart: %v, %v", unprep, err)
	}
	if _, ok := r.spec(t, claim.UID); ok {
		t.Error("the claim's spec outlived Unprepare")
	}
	if ids := r.allocations(t); len(ids) != 0 {
		t.Errorf("plugin allocations %v after Unprepare", ids)
	}
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/cdiexec/cdi/bridge/departed"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// sharedWait bounds TestDRASharedCamera's waits for the Lease and the
// slices (schedtest.PodWait those for pods): a leader's takeover is
// within the Lease's duration.
const sharedWait = 2 * time.Minute

// sharedCluster is a real kube-apiserver, kube-scheduler and
// kube-controller-manager (its resourceclaim controller), with the
// shipped DRA examples, and bridges as nodes of it, each with no kubelet
// but the test.
type sharedCluster struct{ *schedtest.Cluster }

// startSharedCluster starts the cluster, its bridge user bound to the
// DRA role and granted the rest of what the bridge's ServiceAccount has.
func startSharedCluster(t *testing.T) *sharedCluster {
	t.Helper()
	c := &sharedCluster{schedtest.Start(t, func() *apitest.Env {
		return apitest.StartWithInstances(t, apitest.Options{Users: []apitest.User{{Name: "bridge"}}})
	})}
	schedtest.BindDRARole(t, c.Client, "bridge")
	c.grantBridge(t)
	c.CreateExamples(t)
	return c
}

// grantBridge gives the bridge's user what bridge/deploy/rbac.yaml gives
// its ServiceAccount beside the DRA role: Nodes, and in the namespace
// Instances, Presences and the Lease.
func (c *sharedCluster) grantBridge(t *testing.T) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cdi-bridge-test"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{kube.Group}, Resources: []string{"instances", "presences"},
			Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bridge"}}}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hostname is the kubernetes.io/hostname label of node: not its name,
// so that the test sees the label selected.
func hostname(node string) string { return "host-" + node }

// sharedNode is a bridge serving the camera pool through DRA as node
// name; pluginDir holds its DRA socket.
type sharedNode struct {
	name, pluginDir string
	cmd             *exec.Cmd
}

// camera is an endpoint of the camera drop-in.
type camera struct {
	id       string
	location string // the location property; none when empty
}

// startSharedNode creates Node name and runs a bridge on it whose
// camera drop-in (capacity 2 per camera) has cams, served through DRA
// with the Kubernetes store, as the bridge's user.
func (c *sharedCluster) startSharedNode(t *testing.T, name string, cams ...camera) *sharedNode {
	t.Helper()
	c.CreateNode(t, name, map[string]string{corev1.LabelHostname: hostname(name)})
	var endpoints []map[string]any
	for _, cam := range cams {
		e := map[string]any{"id": cam.id, "url": "rtsp://192.0.2.1/" + cam.id}
		if cam.location != "" {
			e["properties"] = map[string]string{"location": cam.location}
		}
		endpoints = append(endpoints, e)
	}
	confDir := t.TempDir()
	writeDropIn(t, confDir, "camera.d/endpoint.conf", map[string]any{"cdiVersion": "0.1.0", "name": "cameras", "type": "camera",
		"plugin": "endpoint", "args": map[string]any{"stateDir": exectest.StateDir(t), "capacity": 2, "envPrefix": "CAMERA", "endpoints": endpoints}})
	h := kubelettest.NewHost(t)
	draDir := kubelettest.SocketDir(t, "dra")
	regDir := filepath.Join(draDir, "registry")
	if err := os.Mkdir(regDir, 0o700); err != nil {
		t.Fatal(err)
	}
	n := &sharedNode{name: name, pluginDir: filepath.Join(draDir, "plugin")}
	n.cmd = exec.Command(filepath.Join(binDir, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", binDir, "--node-name", name,
		"--device-plugin-dir", h.Dir, "--pod-resources-socket", h.PodResourcesSocket, "--domain", "cdi.local", "--metrics-address", "",
		"--cdi-spec-dir", t.TempDir(), "--store", "kube", "--namespace", c.Namespace, "--kubeconfig", c.Env.Kubeconfig(t, "bridge"),
		"--dra-pools", "camera-endpoint", "--dra-checkpoint", filepath.Join(t.TempDir(), "claims.json"),
		"--dra-plugin-dir", n.pluginDir, "--dra-registrar-dir", regDir)
	proctest.Start(t, n.cmd, "cdi-bridge "+name, nil)
	return n
}

// stop ends the bridge with SIGTERM and waits for it.
func (n *sharedNode) stop(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Wait(); err != nil {
		t.Fatalf("bridge of %s on SIGTERM: %v", n.name, err)
	}
}

// sharedSlices waits until the driver's slices of the shared camera pool
// are exactly one, naming no node, whose devices select the nodes want
// gives by device name, and returns it.
func (c *sharedCluster) sharedSlices(t *testing.T, want map[string]string) resourceapi.ResourceSlice {
	t.Helper()
	var last []resourceapi.ResourceSlice
	var got map[string]string
	err := kwait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, sharedWait, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=cdi.local"})
		if err != nil {
			return false, nil
		}
		last = nil
		for _, s := range l.Items {
			if s.Spec.Pool.Name == dradevices.SharedPoolName("camera-endpoint") {
				last = append(last, s)
			}
		}
		if len(last) != 1 {
			return false, nil
		}
		got = map[string]string{}
		for _, d := range last[0].Spec.Devices {
			got[d.Name] = schedtest.Selects(d)
		}
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Fatalf("shared slices: %v; devices select %v, want %v; slices %+v", err, got, want, last)
	}
	s := last[0]
	if s.Spec.NodeName != nil || s.Spec.NodeSelector != nil || s.Spec.AllNodes != nil || s.Spec.PerDeviceNodeSelection == nil ||
		!*s.Spec.PerDeviceNodeSelection || len(s.OwnerReferences) != 0 {
		t.Fatalf("shared slice %+v: want per-device node selection, no node, no owner", s)
	}
	return s
}

// podOn creates a pod on node whose claim is made from template.
func (c *sharedCluster) podOn(t *testing.T, name, node, template string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		NodeSelector:   map[string]string{corev1.LabelHostname: hostname(node)},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "camera", ResourceClaimTemplateName: &template}},
		Containers: []corev1.Container{{Name: "c", Image: "none", Resources: corev1.ResourceRequirements{
			Claims: []corev1.ResourceClaim{{Name: "camera"}}}}},
	}}
	if _, err := c.Client.CoreV1().Pods(c.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bound is whether the scheduler bound the pod to a node.
func bound(p *corev1.Pod) bool { return p.Spec.NodeName != "" }

// leader waits until the departed-node Lease is held by one of nodes
// other than not, and returns it.
func (c *sharedCluster) leader(t *testing.T, not string) string {
	t.Helper()
	var holder string
	err := kwait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, sharedWait, true, func(ctx context.Context) (bool, error) {
		lease, err := c.Client.CoordinationV1().Leases(c.Namespace).Get(ctx, departed.DefaultLease, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *lease.Spec.HolderIdentity
		return holder != "" && holder != not, nil
	})
	if err != nil {
		t.Fatalf("no leader but %q: %v (holder %q)", not, err, holder)
	}
	return holder
}

// prepare asks node's DRA driver, as its kubelet would, to prepare claim.
func prepare(t *testing.T, n *sharedNode, claim *resourceapi.ResourceClaim) *drapbv1.NodePrepareResourceResponse {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.pluginDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := drapbv1.NewDRAPluginClient(conn).NodePrepareResources(t.Context(), &drapbv1.NodePrepareResourcesRequest{
		Claims: []*drapbv1.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil {
		t.Fatalf("prepare on %s: %v", n.name, err)
	}
	return resp.Claims[string(claim.UID)]
}

// TestDRASharedCamera: three bridges serve the camera pool through DRA.
// The camera gate (capacity 2) is seen by n1 and n2, dock by n3 alone.
// The elected bridge publishes both once, in one slice of no node, each
// selecting the nodes that see it; the real scheduler gives gate to two
// claims on two nodes, refuses a third (its capacity counted once for
// the cluster), and never gives it on n3. A claim is prepared on its node
// by the endpoint plugin's ADD, and refused on a node that does not see
// its camera. When the leader stops, the next adopts the slice: the same
// object, updated when a fourth node sees gate, and again when that
// node's Node is deleted.
func TestDRASharedCamera(t *testing.T) {
	c := startSharedCluster(t)
	gate, dock := camera{"gate", "lobby"}, camera{id: "dock"}
	nodes := map[string]*sharedNode{
		"n1": c.startSharedNode(t, "n1", gate), "n2": c.startSharedNode(t, "n2", gate), "n3": c.startSharedNode(t, "n3", dock),
	}
	first := c.leader(t, "")
	slice := c.sharedSlices(t, map[string]string{"gate": "[host-n1 host-n2]", "dock": "[host-n3]"})

	c.podOn(t, "on-n1", "n1", "lobby-camera")
	c.podOn(t, "on-n2", "n2", "lobby-camera")
	var claims []*resourceapi.ResourceClaim
	for _, name := range []string{"on-n1", "on-n2"} {
		claim := c.AllocatedClaim(t, c.WaitPod(t, name, "scheduled", bound))
		r := claim.Status.Allocation.Devices.Results
		if len(r) != 1 || r[0].Pool != "camera-endpoint" || r[0].Device != "gate" {
			t.Fatalf("pod %s: allocation %+v, want gate of the shared pool", name, r)
		}
		claims = append(claims, claim)
	}
	c.podOn(t, "third", "n1", "lobby-camera")
	c.WaitPod(t, "third", "unschedulable: gate's two slots are taken", schedtest.Unschedulable)
	c.podOn(t, "gate-on-n3", "n3", "lobby-camera")
	c.WaitPod(t, "gate-on-n3", "unschedulable: n3 does not see gate", schedtest.Unschedulable)
	c.podOn(t, "dock-on-n3", "n3", "one-camera")
	if r := c.AllocatedClaim(t, c.WaitPod(t, "dock-on-n3", "scheduled", bound)).Status.Allocation.Devices.Results; len(r) != 1 || r[0].Device != "dock" {
		t.Fatalf("pod dock-on-n3: allocation %+v, want dock", r)
	}

	got := prepare(t, nodes["n1"], claims[0])
	if got == nil || got.Error != "" || len(got.Devices) != 1 || got.Devices[0].PoolName != "camera-endpoint" || len(got.Devices[0].CdiDeviceIds) != 1 {
		t.Fatalf("prepare on n1: %+v", got)
	}
	if got := prepare(t, nodes["n3"], claims[1]); got == nil || got.Error == "" {
		t.Errorf("prepare of a gate claim on n3, which does not see it: %+v, want an error", got)
	}

	nodes[first].stop(t)
	next := c.leader(t, first)
	t.Logf("leader %s stopped, %s leads", first, next)
	n4 := c.startSharedNode(t, "n4", gate)
	// The stopped bridge's node keeps its place: a bridge that stops is
	// not a node that left.
	adopted := c.sharedSlices(t, map[string]string{"gate": "[host-n1 host-n2 host-n4]", "dock": "[host-n3]"})
	if adopted.UID != slice.UID {
		t.Errorf("the shared slice was replaced (%s, before %s): the next leader must adopt it", adopted.UID, slice.UID)
	}

	// n4 leaves the cluster: the leader clears its Presences, and gate
	// no longer selects it.
	n4.stop(t)
	if err := c.Client.CoreV1().Nodes().Delete(t.Context(), "n4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.sharedSlices(t, map[string]string{"gate": "[host-n1 host-n2]", "dock": "[host-n3]"})
}

package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// testUser is the API server's test identity that the bridge process runs
// as, bound exactly as the manifests bind the ServiceAccount.
const testUser = "bridge"

const (
	// node is the bridge's node; departedNode's Node is deleted while it
	// holds a slot.
	node, departedNode = "n1", "n2"
	camID              = "gate"
	// registerWait bounds every wait on the bridge.
	registerWait = 30 * time.Second
)

var (
	instancesResource = schema.GroupVersionResource{Group: "cdi.local", Version: "v1alpha1", Resource: "instances"}
	secretsResource   = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	podsResource      = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodesResource     = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	leasesResource    = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// camInstance is the Instance of the camera the test's drop-in lists.
func camInstance() string { return instance.Name("camera-endpoint", camID, "", true) }

// TestDeploy applies the manifests to a real API server, then runs a real
// cdi-bridge, with the DaemonSet's command line, holding the manifests'
// permissions and nothing more.
func TestDeploy(t *testing.T) {
	k, objs := mustRender(t)
	env := apitest.Start(t, apitest.Options{Users: []apitest.User{{Name: testUser}}})
	if !t.Run("every manifest applies cleanly", func(t *testing.T) { applyAll(t, env.Config, objs) }) {
		return
	}
	t.Run("applying again changes nothing", func(t *testing.T) {
		// Compared from the second apply on: after the first, the server
		// writes the CRD's status conditions.
		versions := applyAll(t, env.Config, objs)
		for key, v := range applyAll(t, env.Config, objs) {
			if v != versions[key] {
				t.Errorf("%s: resourceVersion %s became %s: the manifests do not round-trip", key, versions[key], v)
			}
		}
	})
	admin, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sa := only(t, objs, "ServiceAccount")
	t.Run("the ServiceAccount has exactly the bridge's access", func(t *testing.T) {
		user := "system:serviceaccount:" + k.Namespace + ":" + sa.GetName()
		groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + k.Namespace, "system:authenticated"}
		checkMatrix(t, subjectReviewer(admin, user, groups), append(wantAccess(k.Namespace), brokersOff(k.Namespace)...))
	})
	bridgeClient := bindTestUser(t, env, objs, sa)
	t.Run("the test user has exactly the bridge's access", func(t *testing.T) {
		checkMatrix(t, selfReviewer(bridgeClient), wantAccess(k.Namespace))
	})
	ds := flags(t, "cdi-bridge", decodeDaemonSet(t, objs).Spec.Template.Spec.containerNamed(t, "bridge").Args)
	for _, n := range []string{node, departedNode} {
		createNode(t, admin, n)
	}
	b := startBridge(t, ds, env.Kubeconfig(t, testUser), k.Namespace)
	if !t.Run("the bridge registers and allocates", func(t *testing.T) { testAllocate(t, b, admin, k.Namespace) }) {
		return
	}
	t.Run("the bridge leads and clears a departed node", func(t *testing.T) {
		testDeparted(t, admin, k.Namespace, ds["leader-election-lease"])
	})
	t.Run("outside the role is forbidden", func(t *testing.T) { testForbidden(t, bridgeClient, k.Namespace) })
}

// bindTestUser applies a copy of each of the manifests' bindings with the
// ServiceAccount, their only subject, replaced by the test user, waits
// until the authorizer has them, and returns the test user's client.
func bindTestUser(t *testing.T, env *apitest.Env, objs []*unstructured.Unstructured, sa *unstructured.Unstructured) dynamic.Interface {
	t.Helper()
	var bindings []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() != "RoleBinding" && obj.GetKind() != "ClusterRoleBinding" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
		want := map[string]any{"kind": "ServiceAccount", "name": sa.GetName(), "namespace": sa.GetNamespace()}
		if len(subjects) != 1 || !equalJSON(subjects[0], want) {
			t.Fatalf("%s %s binds %v, want only %v", obj.GetKind(), obj.GetName(), subjects, want)
		}
		b := obj.DeepCopy()
		b.SetName(obj.GetName() + "-test-user")
		b.Object["subjects"] = []any{map[string]any{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": testUser}}
		bindings = append(bindings, b)
	}
	if len(bindings) == 0 {
		t.Fatal("the manifests bind nothing")
	}
	applyAll(t, env.Config, bindings)
	cfg, err := env.ConfigFor(testUser)
	if err != nil {
		t.Fatal(err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, selfReviewer(client), wantAccess(sa.GetNamespace())[:1])
	waitAllowed(t, selfReviewer(client), []access{{"", "nodes", "", "", []string{"watch"}}})
	return client
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func createNode(t *testing.T, admin dynamic.Interface, name string) {
	t.Helper()
	n := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name}}}
	if _, err := admin.Resource(nodesResource).Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runningBridge is a cdi-bridge process and the kubelet fakes it talks to.
type runningBridge struct {
	kubelet *kubelettest.Kubelet
	pods    *kubelettest.PodResources
}

// startBridge runs cdi-bridge with the DaemonSet's flags ds, but for what
// a pod gets from its node: the downward API's values, the host's
// directories (temporary ones here: the endpoint plugin and one camera of
// two slots), the kubelet's sockets (the fakes'), the in-cluster
// configuration (a kubeconfig) and the metrics port (a free one).
func startBridge(t *testing.T, ds map[string]string, kubeconfig, ns string) *runningBridge {
	confDir := t.TempDir()
	conf, _ := json.Marshal(map[string]any{"cdiVersion": "0.1.0", "name": "cameras", "type": "camera", "plugin": "endpoint",
		"args": map[string]any{"stateDir": exectest.StateDir(t), "capacity": 2,
			"endpoints": []map[string]any{{"id": camID, "url": "rtsp://192.0.2.1/stream"}}}})
	_ = os.MkdirAll(filepath.Join(confDir, "camera.d"), 0o755)
	if err := os.WriteFile(filepath.Join(confDir, "camera.d", "endpoint.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	h := kubelettest.NewHost(t)
	b := &runningBridge{kubelet: h.Kubelet, pods: h.Pods}
	args := maps.Clone(ds)
	maps.Copy(args, map[string]string{"node-name": node, "namespace": ns, "conf-dir": confDir, "plugin-path": binDir,
		"device-plugin-dir": h.Dir, "pod-resources-socket": h.PodResourcesSocket, "kubeconfig": kubeconfig, "metrics-address": "127.0.0.1:0"})
	runBridge(t, args)
	return b
}

// runBridge starts cdi-bridge with args, until the test ends; its log is
// shown if the test fails, and fails it if it tells of a refusal.
func runBridge(t *testing.T, args map[string]string) {
	var argv []string
	for _, name := range slices.Sorted(maps.Keys(args)) {
		argv = append(argv, "--"+name+"="+args[name])
	}
	cmd := exec.Command(binPath("cdi-bridge"), argv...)
	t.Logf("cdi-bridge %s", strings.Join(argv, " "))
	proctest.Start(t, cmd, "the bridge", func(log []byte) {
		// A refusal the subtests did not notice is still a missing rule.
		if bytes.Contains(bytes.ToLower(log), []byte("forbidden")) {
			t.Error("the API server refused the bridge something")
		}
	})
}

// testAllocate: the bridge must register the camera with the kubelet
// fake, and an Allocate must claim a slot in the camera's Instance.
func testAllocate(t *testing.T, b *runningBridge, admin dynamic.Interface, ns string) {
	resource, slot := "cdi.local/"+camInstance(), instance.SlotID(camInstance(), 0)
	if _, err := b.kubelet.WaitFor(resource, registerWait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
	// The container that gets the slot keeps it (slot reclaim).
	b.pods.Set(map[string][]string{resource: {slot}})
	if _, err := b.kubelet.Allocate(t.Context(), resource, []string{slot}); err != nil {
		t.Fatalf("Allocate %s: %v", slot, err)
	}
	obj, err := admin.Resource(instancesResource).Namespace(ns).Get(t.Context(), camInstance(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	usage, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "deviceUsage")
	if usage[slot] != node {
		t.Errorf("Instance %s/%s deviceUsage %v, want %s held by %s", ns, camInstance(), usage, slot, node)
	}
}

// testDeparted: the bridge, the only one, must win the Lease; given a
// claim of another node, it must free it once that node's Node is deleted.
// This is the Lease and the Nodes in the Role at work.
func testDeparted(t *testing.T, admin dynamic.Interface, ns, lease string) {
	err := poll(t, func(ctx context.Context) (bool, error) {
		l, err := admin.Resource(leasesResource).Namespace(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		holder, _, _ := unstructured.NestedString(l.Object, "spec", "holderIdentity")
		return holder == node, nil
	})
	if err != nil {
		t.Fatalf("Lease %s/%s never held by %s: %v", ns, lease, node, err)
	}
	slot := instance.SlotID(camInstance(), 1)
	instances := admin.Resource(instancesResource).Namespace(ns)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := instances.Get(t.Context(), camInstance(), metav1.GetOptions{})
		if err == nil {
			err = unstructured.SetNestedField(obj.Object, departedNode, "spec", "deviceUsage", slot)
		}
		if err == nil {
			_, err = instances.Update(t.Context(), obj, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Resource(nodesResource).Delete(t.Context(), departedNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = poll(t, func(ctx context.Context) (bool, error) {
		obj, err := instances.Get(ctx, camInstance(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		usage, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "deviceUsage")
		return usage[slot] == "", nil
	})
	if err != nil {
		t.Fatalf("%s's claim on %s never freed: %v", departedNode, slot, err)
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// poll calls done until it is true, fails, or registerWait passes.
func poll(t *testing.T, done func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, registerWait, true, done)
}

// testForbidden makes, as the bridge, calls its role does not allow.
func testForbidden(t *testing.T, c dynamic.Interface, ns string) {
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.local/v1alpha1", "kind": "Instance",
		"metadata": map[string]any{"name": "elsewhere", "namespace": "default"},
		"spec":     map[string]any{"configurationName": "x", "deviceId": "y", "shared": true, "capacity": int64(1)}}}
	instances := c.Resource(instancesResource)
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"list secrets", func(ctx context.Context) error {
			_, err := c.Resource(secretsResource).Namespace(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"patch an Instance", func(ctx context.Context) error {
			_, err := instances.Namespace(ns).Patch(ctx, camInstance(), types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"create an Instance in another namespace", func(ctx context.Context) error {
			_, err := instances.Namespace("default").Create(ctx, other, metav1.CreateOptions{})
			return err
		}},
		{"delete every Instance at once", func(ctx context.Context) error {
			return instances.Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}},
		{"delete a node", func(ctx context.Context) error {
			return c.Resource(nodesResource).Delete(ctx, node, metav1.DeleteOptions{})
		}},
		{"list pods", func(ctx context.Context) error {
			_, err := c.Resource(podsResource).List(ctx, metav1.ListOptions{})
			return err
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			if err := call.do(t.Context()); !apierrors.IsForbidden(err) {
				t.Errorf("%v, want Forbidden", err)
			}
		})
	}
}

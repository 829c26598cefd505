package deploy

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/deploy/internal/helmchart"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// brokersExamples is the directory of the Brokers' examples and RBAC.
const brokersExamples = "examples/brokers"

var (
	brokersResource   = schema.GroupVersionResource{Group: "cdi.local", Version: "v1alpha1", Resource: "brokers"}
	jobsResource      = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	namespaceResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// brokersRBAC returns the Brokers' objects among objs, by kind and
// namespace ("" for cluster-wide ones).
func brokersRBAC(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetName() == "cdi-bridge-brokers" {
			out[o.GetKind()+" "+o.GetNamespace()] = o
		}
	}
	return out
}

// TestChartBrokers: off by default; enabled, the bridge is told the
// namespaces and given the rules of examples/brokers/rbac.yaml, the
// Role's in each namespace listed and in no other.
func TestChartBrokers(t *testing.T) {
	shipped := brokersRBAC(readExamples(t, brokersExamples, ""))
	t.Run("off by default", func(t *testing.T) {
		_, objs := helmTemplate(t)
		f := flags(t, "cdi-bridge", decodeDaemonSet(t, objs).Spec.Template.Spec.containerNamed(t, "bridge").Args)
		if got := brokersRBAC(objs); len(got) != 0 || f["broker-namespaces"] != "" {
			t.Errorf("without brokers.enabled: %v, --broker-namespaces=%q", slices.Sorted(maps.Keys(got)), f["broker-namespaces"])
		}
	})
	for _, dra := range []bool{true, false} {
		// No comma in the name: helm takes one in a --values path for two.
		t.Run("enabled "+map[bool]string{true: "with", false: "without"}[dra]+" DRA", func(t *testing.T) {
			values := "brokers: {enabled: true, namespaces: [cams, labs]}\n"
			if dra {
				values += "dra: {pools: [tty-generic]}\n"
			}
			_, objs := helmTemplate(t, writeValues(t, values))
			f := flags(t, "cdi-bridge", decodeDaemonSet(t, objs).Spec.Template.Spec.containerNamed(t, "bridge").Args)
			if f["broker-namespaces"] != "cams,labs" {
				t.Errorf("--broker-namespaces=%q, want cams,labs", f["broker-namespaces"])
			}
			got := brokersRBAC(objs)
			want := []string{"ClusterRole ", "ClusterRoleBinding ", "Role cams", "Role labs", "RoleBinding cams", "RoleBinding labs"}
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
				t.Fatalf("objects %q, want %q", keys, want)
			}
			checkRules(t, got["ClusterRole "], shipped["ClusterRole "], dra)
			for _, ns := range []string{"cams", "labs"} {
				checkRules(t, got["Role "+ns], shipped["Role "], dra)
				subjects, _, _ := unstructured.NestedSlice(got["RoleBinding "+ns].Object, "subjects")
				if !equalJSON(subjects, []map[string]any{{"kind": "ServiceAccount", "name": "cdi-bridge", "namespace": "cdi-system"}}) {
					t.Errorf("RoleBinding in %s binds %v", ns, subjects)
				}
			}
		})
	}
	t.Run("enabled without namespaces is refused", func(t *testing.T) {
		_, err := helmchart.Template(t.Context(), chartDir, writeValues(t, "brokers: {enabled: true}"))
		if err == nil || !strings.Contains(err.Error(), "brokers.namespaces must list") {
			t.Errorf("%v, want it refused", err)
		}
	})
}

// checkRules checks that got's rules are shipped's, the last one (the
// claim templates, for DRA pools) only when all.
func checkRules(t *testing.T, got, shipped *unstructured.Unstructured, all bool) {
	t.Helper()
	want := shipped.Object["rules"].([]any)
	if !all {
		want = want[:len(want)-1]
	}
	if !equalJSON(got.Object["rules"], want) {
		t.Errorf("%s %s rules differ from %s/rbac.yaml's:\n%v\n%v", got.GetKind(), got.GetNamespace(), brokersExamples, got.Object["rules"], want)
	}
}

// The examples are objects the API server takes, the CRD's own rules
// included; and Brokers those rules refuse are refused.
func TestBrokersExamplesApply(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	if err := apitest.InstallCRD(t.Context(), env.Config, "crd/brokers.yaml"); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	objs := readExamples(t, brokersExamples, ns)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	if kinds["Broker"] != 4 || kinds["Deployment"] != 1 || kinds["Role"] != 1 {
		t.Errorf("examples: %v", kinds)
	}
	applyAll(t, env.Config, objs)
	admin, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	brokers := admin.Resource(brokersResource).Namespace(ns)
	for _, tc := range []struct{ name, yaml string }{
		{"1cam", `{pool: p, job: {template: {}}}`},
		{"both", `{pool: p, job: {template: {}}, deployment: {template: {}}}`},
		{"neither", `{pool: p}`},
		{"count", `{pool: p, count: 2, job: {template: {}}}`},
		{"services", `{pool: p, strategy: Pool, deployment: {template: {}}, services: {perDevice: {}}}`},
		{"strategy", `{pool: p, strategy: Every, job: {template: {}}}`},
	} {
		spec := map[string]any{}
		if err := yaml.Unmarshal([]byte(tc.yaml), &spec); err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cdi.local/v1alpha1", "kind": "Broker",
			"metadata": map[string]any{"name": tc.name}, "spec": spec}}
		if _, err := brokers.Create(t.Context(), obj, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("Broker %s %s: %v, want it refused as invalid", tc.name, tc.yaml, err)
		}
	}
}

// brokersAccess is the bridge's access with Brokers on in served, as
// brokersRBAC grants it beside what wantAccess says, and a sample of
// what it must not have: nothing of the workloads in other, and no
// update of a Job anywhere (a Job is replaced, never changed).
func brokersAccess(ns, served, other string) []access {
	workloads := []access{
		{"batch", "jobs", served, "", []string{"get", "list", "watch", "create", "patch", "delete"}},
		{"apps", "deployments", served, "", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{"", "services", served, "", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{"events.k8s.io", "events", served, "", []string{"create", "patch"}},
		{"events.k8s.io", "events", other, "", nil},
		{"resource.k8s.io", "deviceclasses", "", "", nil},
		{"cdi.local", "brokers", "", "", []string{"list", "watch"}},
		{"cdi.local", "brokers", other, "b", []string{"list", "watch"}},
		{"cdi.local", "brokers/status", other, "b", []string{"update"}},
		{"resource.k8s.io", "resourceclaimtemplates", served, "", nil},
	}
	for _, r := range []string{"jobs", "deployments", "services"} {
		group := map[string]string{"jobs": "batch", "deployments": "apps", "services": ""}[r]
		workloads = append(workloads, access{group, r, other, "", nil}, access{group, r, ns, "", nil})
	}
	return append(wantAccess(ns), workloads...)
}

// brokersOff is what the bridge must not have with Brokers off (the
// chart's default): nothing of Brokers or workloads.
func brokersOff(ns string) []access {
	return []access{
		{"cdi.local", "brokers", "", "", nil},
		{"cdi.local", "brokers/status", ns, "b", nil},
		{"batch", "jobs", ns, "", nil},
		{"apps", "deployments", "default", "", nil},
	}
}

// TestDeployBrokers applies the chart with Brokers on for one namespace
// to a real API server, checks the bridge's access, and runs a real
// cdi-bridge with the DaemonSet's command line holding that access and
// nothing more: it makes a Broker's Job in the namespace served, tells a
// Broker elsewhere it is not acted on, and could not act there.
func TestDeployBrokers(t *testing.T) {
	const served, other = "cams", "elsewhere"
	_, objs := helmTemplate(t, writeValues(t, "brokers: {enabled: true, namespaces: ["+served+"]}"))
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return kindRank(a) - kindRank(b) })
	env := apitest.Start(t, apitest.Options{Users: []apitest.User{{Name: testUser}}})
	admin, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{served, other} {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		if _, err := admin.Resource(namespaceResource).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	applyAll(t, env.Config, objs)
	sa := only(t, objs, "ServiceAccount")
	bridgeClient := bindTestUser(t, env, objs, sa)
	waitAllowed(t, selfReviewer(bridgeClient), brokersAccess(sa.GetNamespace(), served, other)[:1])
	t.Run("the bridge has exactly its access", func(t *testing.T) {
		checkMatrix(t, selfReviewer(bridgeClient), brokersAccess(sa.GetNamespace(), served, other))
	})
	ds := flags(t, "cdi-bridge", decodeDaemonSet(t, objs).Spec.Template.Spec.containerNamed(t, "bridge").Args)
	createNode(t, admin, node)
	startBridge(t, ds, env.Kubeconfig(t, testUser), sa.GetNamespace())
	for _, ns := range []string{served, other} {
		createBroker(t, admin, ns, "inventory")
	}
	t.Run("a Broker's Job is made where it is served", func(t *testing.T) {
		err := poll(t, func(ctx context.Context) (bool, error) {
			jobs, err := admin.Resource(jobsResource).Namespace(served).List(ctx, metav1.ListOptions{LabelSelector: "cdi.local/broker=inventory"})
			return err == nil && len(jobs.Items) == 1, err
		})
		if err != nil {
			t.Fatalf("no Job for the camera in %s: %v", served, err)
		}
	})
	t.Run("a Broker elsewhere is told so, and has nothing made", func(t *testing.T) {
		err := poll(t, func(ctx context.Context) (bool, error) {
			b, err := admin.Resource(brokersResource).Namespace(other).Get(ctx, "inventory", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conditions, _, _ := unstructured.NestedSlice(b.Object, "status", "conditions")
			data, _ := json.Marshal(conditions)
			return strings.Contains(string(data), `"reason":"NamespaceNotServed"`), nil
		})
		if err != nil {
			t.Errorf("Broker %s/inventory never told it is not acted on: %v", other, err)
		}
		if jobs, err := admin.Resource(jobsResource).Namespace(other).List(t.Context(), metav1.ListOptions{}); err != nil || len(jobs.Items) != 0 {
			t.Errorf("Jobs in %s: %v, %v", other, jobs, err)
		}
	})
	t.Run("the bridge cannot make a Job elsewhere", func(t *testing.T) {
		job := readJob(t)
		if _, err := bridgeClient.Resource(jobsResource).Namespace(other).Create(t.Context(), job, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%v, want Forbidden", err)
		}
	})
}

// createBroker creates the Job-per-camera example as name in ns.
func createBroker(t *testing.T, admin dynamic.Interface, ns, name string) {
	t.Helper()
	for _, o := range readExamples(t, brokersExamples, ns) {
		if o.GetKind() == "Broker" && o.GetName() == "camera-inventory" {
			o.SetName(name)
			if _, err := admin.Resource(brokersResource).Namespace(ns).Create(t.Context(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no camera-inventory example")
}

// readJob is a Job of the example Broker's spec.
func readJob(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(brokersExamples, "job-per-camera.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Spec struct{ Job map[string]any }
	}
	if err := yaml.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "forbidden"}, "spec": b.Spec.Job}}
}

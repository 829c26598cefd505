package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

var (
	selfReviews    = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"}
	subjectReviews = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "subjectaccessreviews"}
)

// allVerbs are the verbs a matrix row is checked for.
var allVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// access is one row of the matrix: what a subject may do to a resource,
// in a namespace ("" for cluster-wide) and by a name ("" for any).
type access struct {
	group, resource, namespace, name string
	allowed                          []string
}

// wantAccess is exactly what the bridge needs (rbac.yaml says why), and
// a sample of what it must not have.
func wantAccess(ns string) []access {
	lease := "cdi-bridge-departed-nodes"
	return []access{
		{"cdi.local", "instances", ns, "", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"cdi.local", "instances", ns, "some-instance", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"cdi.local", "instances", "default", "", nil},
		{"cdi.local", "instances", "", "", nil},
		{"cdi.local", "presences", ns, "", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"cdi.local", "presences", ns, "pool.n1", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"cdi.local", "presences", "default", "", nil},
		{"cdi.local", "presences", "", "", nil},
		{"coordination.k8s.io", "leases", ns, lease, []string{"get", "create", "update"}},
		{"coordination.k8s.io", "leases", ns, "another-lease", []string{"create"}},
		{"coordination.k8s.io", "leases", ns, "", []string{"create"}},
		{"coordination.k8s.io", "leases", "kube-system", lease, nil},
		{"", "nodes", "", "", []string{"get", "list", "watch"}},
		{"", "nodes", "", "n1", []string{"get", "list", "watch"}},
		{"", "secrets", ns, "", nil},
		{"", "configmaps", ns, "", nil},
		{"", "pods", ns, "", []string{"get"}},
		{"", "pods", "", "", []string{"get"}},
		{"", "events", ns, "", nil},
		{"", "serviceaccounts", ns, "cdi-bridge", nil},
		{"apps", "daemonsets", ns, "cdi-bridge", nil},
		{"rbac.authorization.k8s.io", "roles", ns, "cdi-bridge", nil},
		{"apiextensions.k8s.io", "customresourcedefinitions", "", "instances.cdi.local", nil},
		{"apiextensions.k8s.io", "customresourcedefinitions", "", "presences.cdi.local", nil},
	}
}

// reviewer asks the API server whether one subject may do what attrs
// (a ResourceAttributes object) say.
type reviewer func(ctx context.Context, attrs map[string]any) (bool, error)

// selfReviewer asks for the client's own identity.
func selfReviewer(client dynamic.Interface) reviewer {
	return func(ctx context.Context, attrs map[string]any) (bool, error) {
		return review(ctx, client.Resource(selfReviews), "SelfSubjectAccessReview", map[string]any{"resourceAttributes": attrs})
	}
}

// subjectReviewer asks, as the admin, for another identity: here the
// ServiceAccount itself, bound by the manifests' own bindings.
func subjectReviewer(admin dynamic.Interface, user string, groups []string) reviewer {
	return func(ctx context.Context, attrs map[string]any) (bool, error) {
		g := make([]any, len(groups))
		for i, s := range groups {
			g[i] = s
		}
		spec := map[string]any{"user": user, "groups": g, "resourceAttributes": attrs}
		return review(ctx, admin.Resource(subjectReviews), "SubjectAccessReview", spec)
	}
}

func review(ctx context.Context, r dynamic.NamespaceableResourceInterface, kind string, spec map[string]any) (bool, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec,
	}}
	got, err := r.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("%s: %w", kind, err)
	}
	allowed, _, err := unstructured.NestedBool(got.Object, "status", "allowed")
	return allowed, err
}

func attributes(a access, verb string) map[string]any {
	return map[string]any{"group": a.group, "resource": a.resource, "namespace": a.namespace, "name": a.name, "verb": verb}
}

// checkMatrix asks about every verb of every row.
func checkMatrix(t *testing.T, may reviewer, rows []access) {
	for _, a := range rows {
		for _, verb := range allVerbs {
			got, err := may(t.Context(), attributes(a, verb))
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Contains(a.allowed, verb); got != want {
				t.Errorf("%s %s.%s in %q named %q: allowed %v, want %v", verb, a.resource, a.group, a.namespace, a.name, got, want)
			}
		}
	}
}

// waitAllowed waits until the RBAC authorizer's cache has the new
// bindings: the subject may do the first verb of each row.
func waitAllowed(t *testing.T, may reviewer, rows []access) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, a := range rows {
			if ok, err := may(ctx, attributes(a, a.allowed[0])); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the bindings never took effect: %v", err)
	}
}

package apitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// InstanceCRD is the project's Instance CustomResourceDefinition,
// relative to the repository's root.
const InstanceCRD = "bridge/deploy/crd/instances.yaml"

var crdResource = schema.GroupVersionResource{
	Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
}

// RepoFile returns the path of rel, a path relative to the repository's
// root, found by walking up from the working directory.
func RepoFile(rel string) (string, error) {
	e2e, err := findE2E()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(filepath.Dir(e2e)), rel), nil
}

// InstallCRD creates the CustomResourceDefinition in the YAML file at
// path (one document) and waits until the server reports it Established,
// from when its resources are served.
func InstallCRD(ctx context.Context, cfg *rest.Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &obj.Object); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if gvk := obj.GroupVersionKind(); gvk.Group != crdResource.Group || gvk.Kind != "CustomResourceDefinition" {
		return fmt.Errorf("%s: a %s, not a CustomResourceDefinition", path, gvk)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := client.Resource(crdResource)
	if _, err := crds.Create(ctx, obj, metav1.CreateOptions{FieldManager: "apitest"}); err != nil {
		return fmt.Errorf("creating %s from %s: %w", obj.GetName(), path, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return established(got), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to be established: %w", obj.GetName(), err)
	}
	return nil
}

// established reports whether a CRD's Established condition is True.
func established(crd *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conditions {
		cond, ok := c.(map[string]any)
		if ok && cond["type"] == "Established" && cond["status"] == "True" {
			return true
		}
	}
	return false
}

var namespaceResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// StartWithInstances is Start, then the Instance CRD installed.
func StartWithInstances(tb testing.TB, opts Options) *Env {
	tb.Helper()
	env := Start(tb, opts)
	crd, err := RepoFile(InstanceCRD)
	if err == nil {
		err = InstallCRD(tb.Context(), env.Config, crd)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

// Namespace creates a namespace of a fresh name for one test, so that
// tests sharing a server do not see each other's objects, and returns
// its name. The namespace is left behind: the server goes with the test.
func (e *Env) Namespace(tb testing.TB) string {
	tb.Helper()
	client, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		tb.Fatal(err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace"}}
	ns.SetGenerateName("t-")
	got, err := client.Resource(namespaceResource).Create(tb.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("creating a namespace: %v", err)
	}
	return got.GetName()
}

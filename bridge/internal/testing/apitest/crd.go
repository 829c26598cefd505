package apitest

import (
	"context"
	"errors"
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

// InstanceCRD and PresenceCRD are the project's CustomResourceDefinitions
// of the Instance store, relative to the repository's root.
const (
	InstanceCRD = "bridge/deploy/crd/instances.yaml"
	PresenceCRD = "bridge/deploy/crd/presences.yaml"
)

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

// StartWithInstances is Start, then the Instance and Presence CRDs
// installed.
func StartWithInstances(tb testing.TB, opts Options) *Env {
	tb.Helper()
	env := Start(tb, opts)
	if err := env.installInstances(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return env
}

// RunWithInstances is Run, then the Instance and Presence CRDs installed: for the
// benchmarks and the cluster simulation, which are not tests. The caller
// calls StopAndRemove. An error wrapping ErrUnavailable means etcd or the
// Go toolchain is missing.
func RunWithInstances(ctx context.Context, opts Options) (*Env, error) {
	env, err := Run(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("test API server: %w", err)
	}
	if err := env.installInstances(ctx); err != nil {
		return nil, errors.Join(err, env.StopAndRemove())
	}
	return env, nil
}

func (e *Env) installInstances(ctx context.Context) error {
	for _, rel := range []string{InstanceCRD, PresenceCRD} {
		crd, err := RepoFile(rel)
		if err == nil {
			err = InstallCRD(ctx, e.Config, crd)
		}
		if err != nil {
			return fmt.Errorf("installing %s: %w", rel, err)
		}
	}
	return nil
}

// StopAndRemove stops the servers and removes their directory, logs
// included: for a run that has no use for them any more.
func (e *Env) StopAndRemove() error {
	err := e.Stop()
	if rmErr := os.RemoveAll(e.Dir); err == nil {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("stopping the test API server: %w", err)
	}
	return nil
}

// Namespace creates a namespace of a fresh name for one test, so that
// tests sharing a server do not see each other's objects, and returns
// its name. The namespace is left behind: the server goes with the test.
func (e *Env) Namespace(tb testing.TB) string {
	tb.Helper()
	ns, err := e.NewNamespace(tb.Context(), "t-")
	if err != nil {
		tb.Fatal(err)
	}
	return ns
}

// NewNamespace creates a namespace whose name starts with prefix and
// returns its name.
func (e *Env) NewNamespace(ctx context.Context, prefix string) (string, error) {
	client, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return "", fmt.Errorf("kubernetes client: %w", err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace"}}
	ns.SetGenerateName(prefix)
	got, err := client.Resource(namespaceResource).Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a namespace: %w", err)
	}
	return got.GetName(), nil
}

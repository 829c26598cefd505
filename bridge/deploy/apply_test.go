package deploy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// fieldManager owns, in the server's managed fields, what the tests apply.
const fieldManager = "cdi-deploy-test"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// warnings collects the API server's warning headers: a manifest that
// applies with a warning (a deprecated field, a Pod Security violation)
// does not apply cleanly.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// applier applies objects by server-side apply, as `kubectl apply
// --server-side --force-conflicts` does.
type applier struct {
	client   dynamic.Interface
	mapper   meta.RESTMapper
	warnings *warnings
}

func newApplier(cfg *rest.Config) (*applier, error) {
	cfg = rest.CopyConfig(cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	return &applier{client: client, mapper: mapper, warnings: w}, nil
}

// apply applies obj, first checking that render gave it a namespace
// exactly when the server says its kind has one.
func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
	if namespaced != (obj.GetNamespace() != "") {
		return nil, fmt.Errorf("%s %s: namespace %q, but the server says namespaced is %v", gvk.Kind, obj.GetName(), obj.GetNamespace(), namespaced)
	}
	var r dynamic.ResourceInterface = a.client.Resource(m.Resource)
	if namespaced {
		r = a.client.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	got, err := r.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return nil, fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	if gvk.Kind == "CustomResourceDefinition" {
		return got, a.waitEstablished(ctx, obj.GetName())
	}
	return got, nil
}

// waitEstablished waits until the CRD's resources are served.
func (a *applier) waitEstablished(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := a.client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conditions {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", name, err)
	}
	return nil
}

// applyAll applies objs in order and returns each one's resourceVersion
// by kind/namespace/name. Any warning fails the test.
func applyAll(t *testing.T, cfg *rest.Config, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	a, err := newApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, obj := range objs {
		got, err := a.apply(t.Context(), obj)
		if err != nil {
			t.Fatal(err)
		}
		versions[objectKey(obj)] = got.GetResourceVersion()
	}
	for _, w := range a.warnings.list {
		t.Errorf("the API server warned: %s", w)
	}
	return versions
}

func objectKey(obj *unstructured.Unstructured) string {
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

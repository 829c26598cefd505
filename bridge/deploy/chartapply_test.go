package deploy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

var daemonSetsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}

// podMonitorCRD stands in for the Prometheus operator's PodMonitor CRD:
// the group, version and kind the chart's PodMonitor is applied as, with
// any content. It shows that the object is one the API takes, not that
// the operator's schema would.
func podMonitorCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "podmonitors.monitoring.coreos.com"},
		"spec": map[string]any{
			"group": "monitoring.coreos.com", "scope": "Namespaced",
			"names": map[string]any{"kind": "PodMonitor", "listKind": "PodMonitorList", "plural": "podmonitors", "singular": "podmonitor"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// TestChartApplies applies the chart's rendering, with the default values
// and with others, to a real API server: every object must apply without
// a warning. Then it checks the Pod Security exemption the namespace has:
// the bridge's pod breaks the baseline level by its host paths alone.
func TestChartApplies(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	applyAll(t, env.Config, []*unstructured.Unstructured{podMonitorCRD()})
	for _, tc := range []struct {
		name   string
		values []string
	}{
		{"default values", nil},
		{"other values", []string{writeValues(t, otherValues)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, objs := helmTemplate(t, tc.values...)
			applyAll(t, env.Config, objs)
		})
	}
	t.Run("baseline but for host paths", func(t *testing.T) {
		_, objs := helmTemplate(t)
		warned := baselineWarnings(t, env.Config, only(t, objs, "DaemonSet"))
		t.Logf("baseline: %q", warned)
		if len(warned) != 1 || !strings.Contains(warned[0], "hostPath volumes") {
			t.Errorf("the baseline level warns %q, want only of hostPath volumes", warned)
		}
	})
}

// baselineWarnings applies ds, as a dry run, in a namespace that warns of
// what the baseline Pod Security level forbids, and returns the warnings.
func baselineWarnings(t *testing.T, cfg *rest.Config, ds *unstructured.Unstructured) []string {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": "baseline-check", "labels": map[string]any{"pod-security.kubernetes.io/warn": "baseline"}}}}
	applyAll(t, cfg, []*unstructured.Unstructured{ns})
	cfg = rest.CopyConfig(cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds = ds.DeepCopy()
	ds.SetNamespace(ns.GetName())
	_, err = client.Resource(daemonSetsResource).Namespace(ns.GetName()).Apply(t.Context(), ds.GetName(), ds,
		metav1.ApplyOptions{FieldManager: fieldManager, DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.list
}

package kube

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// The bridge's limit on a Presence's devices is the CRD's: were the CRD's
// maxItems lower, a pool the flag check lets through would fail its
// Presence write at the API server.
func TestMaxPresenceDevicesIsTheCRDs(t *testing.T) {
	path, err := apitest.RepoFile(apitest.PresenceCRD)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) == 0 {
		t.Fatalf("%s: no versions", path)
	}
	for _, v := range versions {
		got, found, err := unstructured.NestedFieldNoCopy(v.(map[string]any), "schema", "openAPIV3Schema",
			"properties", "spec", "properties", "devices", "maxItems")
		if err != nil || !found {
			t.Fatalf("%s: spec.devices.maxItems: found %v, %v", path, found, err)
		}
		if got != float64(MaxPresenceDevices) { // JSON numbers decode as float64
			t.Errorf("%s: spec.devices.maxItems is %v, MaxPresenceDevices %d", path, got, MaxPresenceDevices)
		}
	}
}

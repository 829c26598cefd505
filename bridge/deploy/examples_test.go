package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// draExamples is the directory of the DRA front end's examples.
const draExamples = "examples/dra"

// namespacedExample reports whether an example of kind has a namespace.
func namespacedExample(kind string) bool {
	switch kind {
	case "ResourceClaimTemplate", "Broker", "Deployment", "Role", "RoleBinding":
		return true
	}
	return false
}

// readExamples decodes every document of the YAML files of dir, the
// namespaced ones put in ns.
func readExamples(t *testing.T, dir, ns string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("examples in %s: %v, %v", dir, files, err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if namespacedExample(obj.GetKind()) {
				obj.SetNamespace(ns)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// The DRA examples are objects the API server takes as they are: their
// CEL compiles, their constraints name attributes in a valid form, and
// the RBAC refers to real resources.
func TestDRAExamplesApply(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	objs := readExamples(t, draExamples, env.Namespace(t))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	if kinds["DeviceClass"] != 6 || kinds["ResourceClaimTemplate"] != 6 || kinds["ClusterRole"] != 1 {
		t.Errorf("examples: %v", kinds)
	}
	applyAll(t, env.Config, objs)
}

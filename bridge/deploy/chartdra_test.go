package deploy

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// testChartDRA checks otherValues' dra.pools: the bridge is told the
// pools, mounts the kubelet's plugin directories and is bound the
// ClusterRole of examples/dra/rbac.yaml, rule for rule.
func testChartDRA(t *testing.T, objs []*unstructured.Unstructured, pod *podSpec, f map[string]string) {
	t.Helper()
	if f["dra-pools"] != "tty-generic,gpu-drm" {
		t.Errorf("--dra-pools=%q, want tty-generic,gpu-drm", f["dra-pools"])
	}
	bridge := pod.containerNamed(t, "bridge")
	for _, dir := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry"} {
		if host, ro := pod.hostPathAt(bridge, dir); host != dir || ro {
			t.Errorf("%s: host path %q, read-only %v; want the host's, writable", dir, host, ro)
		}
	}
	role, binding := draRBAC(objs)
	if role == nil || binding == nil {
		t.Fatal("no ClusterRole or ClusterRoleBinding cdi-bridge-dra")
	}
	var shipped *unstructured.Unstructured
	for _, o := range readExamples(t, draExamples, "") {
		if o.GetKind() == "ClusterRole" {
			shipped = o
		}
	}
	if !equalJSON(role.Object["rules"], shipped.Object["rules"]) {
		t.Errorf("the chart's cdi-bridge-dra rules differ from %s/rbac.yaml's:\n%v\n%v", draExamples, role.Object["rules"], shipped.Object["rules"])
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if !equalJSON(subjects, []map[string]any{{"kind": "ServiceAccount", "name": "cdi-bridge", "namespace": "cdi-test"}}) {
		t.Errorf("cdi-bridge-dra binds %v", subjects)
	}
}

// draRBAC returns the DRA front end's ClusterRole and binding among objs,
// nil where there is none.
func draRBAC(objs []*unstructured.Unstructured) (role, binding *unstructured.Unstructured) {
	for _, o := range objs {
		switch {
		case o.GetName() != "cdi-bridge-dra":
		case o.GetKind() == "ClusterRole":
			role = o
		case o.GetKind() == "ClusterRoleBinding":
			binding = o
		}
	}
	return role, binding
}

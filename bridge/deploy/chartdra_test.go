package deploy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
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
	testRollingUpdate(t, decodeDaemonSet(t, objs), bridge, f)
	classes := deviceClasses(objs)
	for _, pool := range []string{"tty-generic", "gpu-drm"} {
		c := classes[pool+".devices.example.com"]
		if c == nil {
			t.Errorf("no DeviceClass %s.devices.example.com among %v", pool, slices.Sorted(maps.Keys(classes)))
			continue
		}
		want := map[string]any{"extendedResourceName": "devices.example.com/" + pool, "selectors": []map[string]any{{"cel": map[string]any{
			"expression": `device.driver == "devices.example.com" && device.attributes["devices.example.com"].pool == "` + pool + `"`}}}}
		if !equalJSON(c.Object["spec"], want) {
			t.Errorf("DeviceClass %s: spec %v, want %v", c.GetName(), c.Object["spec"], want)
		}
	}
	if len(classes) != 2 {
		t.Errorf("DeviceClasses %v, want one per pool of dra.pools", slices.Sorted(maps.Keys(classes)))
	}
}

// testRollingUpdate checks that with dra.pools the new pod of an update
// starts before the old one stops (maxSurge 1, maxUnavailable 0), and
// that the bridge is told its pod's UID (--pod-uid), from which its DRA
// driver's socket names are made, so that the two serve side by side.
func testRollingUpdate(t *testing.T, ds *daemonSet, bridge *container, f map[string]string) {
	t.Helper()
	if u := ds.Spec.UpdateStrategy; u.Type != "RollingUpdate" || fmt.Sprint(u.RollingUpdate.MaxSurge) != "1" ||
		fmt.Sprint(u.RollingUpdate.MaxUnavailable) != "0" {
		t.Errorf("updateStrategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", u)
	}
	if f["pod-uid"] != "$(POD_UID)" {
		t.Errorf("--pod-uid=%q, want $(POD_UID)", f["pod-uid"])
	}
	testNodeLock(t, f)
	if !slices.ContainsFunc(bridge.Env, func(e envVar) bool {
		return e.Name == "POD_UID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid"
	}) {
		t.Errorf("no POD_UID from metadata.uid in the bridge's env %+v", bridge.Env)
	}
}

// testNodeLock checks that the bridge locks the node (--node-lock) in
// the state volume, /var/lib/cdi, with DRA or without: of two pods of a
// node side by side only the lock's holder writes its ResourceSlices.
func testNodeLock(t *testing.T, f map[string]string) {
	t.Helper()
	if f["node-lock"] != "/var/lib/cdi/bridge/node.lock" {
		t.Errorf("--node-lock=%q, want /var/lib/cdi/bridge/node.lock", f["node-lock"])
	}
}

// deviceClasses are the DeviceClasses among objs, by name.
func deviceClasses(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "DeviceClass" {
			out[o.GetName()] = o
		}
	}
	return out
}

// The DeviceClasses of examples/dra, for kustomize, are the chart's for
// the pools they name, object for object.
func TestDRAExampleClassesAreTheCharts(t *testing.T) {
	shipped := map[string]*unstructured.Unstructured{}
	var pools []string
	for _, o := range readExamples(t, draExamples, "") {
		if o.GetKind() == "DeviceClass" {
			shipped[o.GetName()] = o
			pools = append(pools, strings.TrimSuffix(o.GetName(), ".cdi.local"))
		}
	}
	_, objs := helmTemplate(t, writeValues(t, "dra: {pools: ["+strings.Join(pools, ", ")+"]}\n"))
	fromChart := deviceClasses(objs)
	if !slices.Equal(slices.Sorted(maps.Keys(fromChart)), slices.Sorted(maps.Keys(shipped))) {
		t.Fatalf("the chart renders DeviceClasses %v for pools %v, the examples have %v",
			slices.Sorted(maps.Keys(fromChart)), pools, slices.Sorted(maps.Keys(shipped)))
	}
	for name, want := range fromChart {
		if !equalJSON(shipped[name].Object, want.Object) {
			t.Errorf("DeviceClass %s: the examples' %v, the chart's %v", name, shipped[name].Object, want.Object)
		}
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

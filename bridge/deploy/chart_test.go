package deploy

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cdiexec/cdi/bridge/deploy/internal/helmchart"
	"github.com/cdiexec/cdi/spec/invoke"
)

// chartDir is the Helm chart, the source of this directory's manifests.
const chartDir = "chart"

// otherValues differ from every default the chart has, so that a value the
// templates ignore shows.
const otherValues = `
image: {repository: registry.example/cdi/cdi-bridge, tag: v9.9.9, pullPolicy: Always}
namespace: cdi-test
domain: devices.example.com
nodeSelector: {cdi.example.com/devices: "true"}
tolerations: [{key: example.com/gpu, operator: Exists, effect: NoSchedule}]
resources:
  bridge: {requests: {cpu: 20m, memory: 100Mi}, limits: {cpu: null, memory: 300Mi}}
  install: {requests: {cpu: 5m, memory: 8Mi}}
dropIns:
  camera.d/lab.conf:
    cdiVersion: 0.1.0
    name: lab
    type: camera
    plugin: endpoint
    args: {endpoints: [{id: door, url: "rtsp://192.0.2.5/stream"}]}
  tty.d/console.conf: '{"cdiVersion":"0.1.0","name":"console","type":"tty","plugin":"generic-tty"}'
metrics: {port: 9100, podMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}
dra: {pools: [tty-generic, gpu-drm]}
`

// writeValues writes a values file into the test's directory.
func writeValues(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// needHelm skips the test with -short: its first helm run builds helm
// from the module proxy, minutes on a cold build cache.
func needHelm(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping with -short: builds and runs helm (make test runs it)")
	}
}

// helmTemplate renders the chart with its values and then valueFiles'.
func helmTemplate(t *testing.T, valueFiles ...string) ([]helmchart.Document, []*unstructured.Unstructured) {
	t.Helper()
	out, err := helmchart.Template(t.Context(), chartDir, valueFiles...)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := helmchart.Split(out)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseDocuments("helm template", out)
	if err != nil {
		t.Fatal(err)
	}
	return docs, objs
}

// byKey indexes objects by kind, namespace and name, failing on a repeat.
func byKey(t *testing.T, what string, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		if _, dup := out[objectKey(obj)]; dup {
			t.Fatalf("%s has %s twice", what, objectKey(obj))
		}
		out[objectKey(obj)] = obj
	}
	return out
}

// TestChart lints the chart and checks that the kustomize layout is its
// default rendering, object by object and file by file, and that other
// values reach the objects they are for.
func TestChart(t *testing.T) {
	needHelm(t)
	t.Run("lint", func(t *testing.T) {
		for _, values := range [][]string{nil, {"--values", writeValues(t, otherValues)}} {
			if out, err := helmchart.Run(t.Context(), chartDir, append([]string{"lint", "--strict", "."}, values...)...); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		}
	})
	docs, fromChart := helmTemplate(t)
	t.Run("kustomize renders the chart's objects", func(t *testing.T) {
		_, objs := mustRender(t)
		want, got := byKey(t, "helm template", fromChart), byKey(t, "the kustomization", objs)
		for _, key := range slices.Sorted(maps.Keys(want)) {
			if obj, ok := got[key]; !ok {
				t.Errorf("%s: rendered by the chart, not by the kustomization (make manifests)", key)
			} else if !equalJSON(obj.Object, want[key].Object) {
				a, _ := json.Marshal(obj.Object)
				b, _ := json.Marshal(want[key].Object)
				t.Errorf("%s differs (make manifests):\nkustomize: %s\nhelm:      %s", key, a, b)
			}
		}
		for key := range got {
			if want[key] == nil {
				t.Errorf("%s: rendered by the kustomization, not by the chart", key)
			}
		}
	})
	t.Run("the generated files are current", func(t *testing.T) {
		files := helmchart.Kustomize(docs, "cdi-system")
		for _, rel := range helmchart.Sources(files) {
			if data, err := os.ReadFile(filepath.FromSlash(rel)); err != nil || string(data) != string(files[rel]) {
				t.Errorf("%s is not what the chart renders (%v): run make manifests", rel, err)
			}
		}
	})
	t.Run("other values", func(t *testing.T) {
		_, objs := helmTemplate(t, writeValues(t, otherValues))
		testOtherValues(t, objs)
	})
	t.Run("no DRA by default", func(t *testing.T) {
		role, binding := draRBAC(fromChart)
		f := flags(t, "cdi-bridge", decodeDaemonSet(t, fromChart).Spec.Template.Spec.containerNamed(t, "bridge").Args)
		if role != nil || binding != nil || f["dra-pools"] != "" || f["pod-uid"] != "" || len(deviceClasses(fromChart)) > 0 {
			t.Errorf("without dra.pools: ClusterRole %v, binding %v, --dra-pools=%q, --pod-uid=%q, DeviceClasses %d",
				role != nil, binding != nil, f["dra-pools"], f["pod-uid"], len(deviceClasses(fromChart)))
		}
		testNodeLock(t, f)
	})
	t.Run("switched off", func(t *testing.T) {
		for _, tc := range []struct{ values, kind string }{
			{"createNamespace: false", "Namespace"},
			{"metrics: {service: {enabled: false}}", "Service"},
		} {
			t.Run(tc.kind, func(t *testing.T) {
				_, objs := helmTemplate(t, writeValues(t, tc.values))
				if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == tc.kind }) {
					t.Errorf("with %s, the chart still renders a %s", tc.values, tc.kind)
				}
				if len(objs) != len(fromChart)-1 {
					t.Errorf("with %s, %d objects, want the default's %d less the %s", tc.values, len(objs), len(fromChart), tc.kind)
				}
			})
		}
	})
	t.Run("a drop-in name that is not <type>.d/<name>.conf is refused", func(t *testing.T) {
		for _, name := range []string{"lab.conf", "camera.d/lab.json", "camera.d/sub/lab.conf", "../x.d/lab.conf"} {
			values := writeValues(t, "dropIns: {"+`"`+name+`"`+": '{}'}\n")
			if _, err := helmchart.Template(t.Context(), chartDir, values); err == nil || !strings.Contains(err.Error(), "is not <type>.d/<name>.conf") {
				t.Errorf("drop-in %q: %v, want it refused", name, err)
			}
		}
	})
}

// testOtherValues checks every value of otherValues in the objects.
func testOtherValues(t *testing.T, objs []*unstructured.Unstructured) {
	for _, obj := range objs {
		// The DRA front end's Warning Event of a Node must be in default,
		// where the API server takes events of objects of no namespace.
		inDefault := obj.GetName() == "cdi-bridge-dra-events"
		if ns := obj.GetNamespace(); ns != "" && ns != "cdi-test" && !(inDefault && ns == "default") {
			t.Errorf("%s: namespace %q, want cdi-test", objectKey(obj), ns)
		}
	}
	if only(t, objs, "Namespace").GetName() != "cdi-test" {
		t.Error("the Namespace is not cdi-test")
	}
	pod := &decodeDaemonSet(t, objs).Spec.Template.Spec
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if c.Image != "registry.example/cdi/cdi-bridge:v9.9.9" || c.ImagePullPolicy != "Always" {
			t.Errorf("container %s: image %s, pull policy %s", c.Name, c.Image, c.ImagePullPolicy)
		}
	}
	bridge := pod.containerNamed(t, "bridge")
	f := flags(t, "cdi-bridge", bridge.Args)
	for name, want := range map[string]string{"domain": "devices.example.com", "conf-dir": "/etc/cdi:/etc/cdi-chart", "metrics-address": ":9100"} {
		if f[name] != want {
			t.Errorf("--%s=%q, want %q", name, f[name], want)
		}
	}
	testProbes(t, bridge, f["metrics-address"])
	if !equalJSON(pod.NodeSelector, map[string]string{"cdi.example.com/devices": "true"}) ||
		!equalJSON(pod.Tolerations, []map[string]any{{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}) {
		t.Errorf("nodeSelector %v, tolerations %v", pod.NodeSelector, pod.Tolerations)
	}
	if !equalJSON(bridge.Resources, map[string]any{"requests": map[string]any{"cpu": "20m", "memory": "100Mi"}, "limits": map[string]any{"memory": "300Mi"}}) {
		t.Errorf("the bridge's resources %v", bridge.Resources)
	}
	testChartDropIns(t, objs, pod)
	testChartDRA(t, objs, pod, f)
	monitor := only(t, objs, "PodMonitor")
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "podMetricsEndpoints")
	if monitor.GetLabels()["release"] != "prom" || !equalJSON(endpoints, []map[string]any{{"port": "metrics", "path": "/metrics", "interval": "15s"}}) {
		t.Errorf("PodMonitor labels %v, endpoints %v", monitor.GetLabels(), endpoints)
	}
	svc := only(t, objs, "Service")
	if ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports"); !equalJSON(ports, []map[string]any{{"name": "metrics", "port": 9100, "targetPort": "metrics", "protocol": "TCP"}}) {
		t.Errorf("Service ports %v", ports)
	}
}

// testChartDropIns checks that otherValues' drop-ins load as the bridge
// would load them.
func testChartDropIns(t *testing.T, objs []*unstructured.Unstructured, pod *podSpec) {
	confs, err := invoke.LoadAll(chartDropIns(t, objs, pod))
	var got []string
	for _, c := range confs {
		got = append(got, c.Type+"/"+c.Name)
	}
	if err != nil || !slices.Equal(got, []string{"camera/lab", "tty/console"}) {
		t.Errorf("the chart's drop-ins load as %v, %v; want camera/lab and tty/console", got, err)
	}
}

// chartDropIns lays the ConfigMap out in a new directory as the
// DaemonSet's volume does, at /etc/cdi-chart in the bridge, and returns
// the directory.
func chartDropIns(t *testing.T, objs []*unstructured.Unstructured, pod *podSpec) string {
	t.Helper()
	cm := only(t, objs, "ConfigMap")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	dir := t.TempDir()
	if host, _ := pod.hostPathAt(pod.containerNamed(t, "bridge"), "/etc/cdi-chart"); host != "" {
		t.Errorf("/etc/cdi-chart is host path %s, want the ConfigMap", host)
	}
	for _, v := range pod.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		if v.ConfigMap.Name != cm.GetName() {
			t.Errorf("volume %s mounts ConfigMap %s, want %s", v.Name, v.ConfigMap.Name, cm.GetName())
		}
		for _, item := range v.ConfigMap.Items {
			path := filepath.Join(dir, filepath.FromSlash(item.Path))
			_ = os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, []byte(data[item.Key]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

package deploy

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestDaemonSet checks, without a server, what the API server cannot: that
// the DaemonSet runs the bridge as the deployment means to.
func TestDaemonSet(t *testing.T) {
	k, objs := mustRender(t)
	ds := decodeDaemonSet(t, objs)
	pod := &ds.Spec.Template.Spec
	bridge := pod.containerNamed(t, "bridge")
	t.Run("pod", func(t *testing.T) {
		if sa := only(t, objs, "ServiceAccount").GetName(); pod.ServiceAccountName != sa {
			t.Errorf("serviceAccountName %q, want the manifests' ServiceAccount %q", pod.ServiceAccountName, sa)
		}
		if !pod.ShareProcessNamespace {
			t.Error("shareProcessNamespace is off: the bridge would be PID 1 and keep the zombies of plugins' escaped children")
		}
		if pod.PriorityClassName != "system-node-critical" {
			t.Errorf("priorityClassName %q", pod.PriorityClassName)
		}
		// One toleration of everything: no taint keeps the bridge off a node.
		if len(pod.Tolerations) != 1 || pod.Tolerations[0]["operator"] != "Exists" || pod.Tolerations[0]["key"] != nil {
			t.Errorf("tolerations %v, want one {operator: Exists}", pod.Tolerations)
		}
		u := ds.Spec.UpdateStrategy
		if u.Type != "RollingUpdate" || fmt.Sprint(u.RollingUpdate.MaxUnavailable) != "1" {
			t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1", u)
		}
	})
	t.Run("image", func(t *testing.T) {
		want := makeImage(t)
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			if c.Image != want {
				t.Errorf("container %s runs %q, want %q, the image `make image` builds", c.Name, c.Image, want)
			}
		}
		if got := k.image("cdi-bridge:dev"); got != want {
			t.Errorf("the kustomization's images entry makes cdi-bridge:dev %q, want %q", got, want)
		}
	})
	f := flags(t, "cdi-bridge", bridge.Args)
	t.Run("flags and environment", func(t *testing.T) { testBridgeFlags(t, bridge, f, k.Namespace) })
	t.Run("probes", func(t *testing.T) { testProbes(t, bridge, f["metrics-address"]) })
	t.Run("host paths", func(t *testing.T) { testHostPaths(t, pod, bridge, f) })
	t.Run("the Role names the bridge's Lease", func(t *testing.T) {
		if lease := f["leader-election-lease"]; !roleNamesLease(only(t, objs, "Role"), lease) {
			t.Errorf("--leader-election-lease=%q, but no Role rule names that Lease", lease)
		}
	})
}

// roleNamesLease reports whether a rule of role grants get and update on
// the Lease of that name, and on it alone.
func roleNamesLease(role *unstructured.Unstructured, lease string) bool {
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	for _, r := range rules {
		r, _ := r.(map[string]any)
		names, _, _ := unstructured.NestedStringSlice(r, "resourceNames")
		resources, _, _ := unstructured.NestedStringSlice(r, "resources")
		verbs, _, _ := unstructured.NestedStringSlice(r, "verbs")
		if slices.Equal(resources, []string{"leases"}) && slices.Equal(names, []string{lease}) &&
			slices.Contains(verbs, "get") && slices.Contains(verbs, "update") {
			return true
		}
	}
	return false
}

func testBridgeFlags(t *testing.T, bridge *container, f map[string]string, namespace string) {
	env := map[string]string{}
	for _, e := range bridge.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["NODE_NAME"] != "spec.nodeName" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("downward API env %v, want NODE_NAME from spec.nodeName and POD_NAMESPACE from metadata.namespace", env)
	}
	for _, a := range bridge.Args {
		for _, ref := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(a, -1) {
			if _, ok := env[ref[1]]; !ok {
				t.Errorf("argument %q refers to $(%s), which the container does not set", a, ref[1])
			}
		}
	}
	want := map[string]string{"store": "kube", "node-name": "$(NODE_NAME)", "namespace": "$(POD_NAMESPACE)"}
	for name, v := range want {
		if f[name] != v {
			t.Errorf("--%s=%q, want %q", name, f[name], v)
		}
	}
	if namespace != "cdi-system" {
		t.Errorf("kustomization namespace %q, want cdi-system, the bridge's default", namespace)
	}
}

// testProbes: readiness on /readyz, liveness (after startup) on /healthz,
// on the port --metrics-address listens on.
func testProbes(t *testing.T, bridge *container, metricsAddr string) {
	_, portText, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		t.Fatalf("--metrics-address=%q: %v", metricsAddr, err)
	}
	port, _ := strconv.Atoi(portText)
	named := map[string]int{}
	for _, p := range bridge.Ports {
		named[p.Name] = p.ContainerPort
	}
	if named["metrics"] != port {
		t.Errorf("ports %v, want metrics: %d", named, port)
	}
	for _, p := range []struct {
		name, path string
		probe      *probe
	}{{"readiness", "/readyz", bridge.ReadinessProbe}, {"liveness", "/healthz", bridge.LivenessProbe}, {"startup", "/healthz", bridge.StartupProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || (g.Port != "metrics" && fmt.Sprint(g.Port) != portText) {
			t.Errorf("%s probe GET %s on port %v, want %s on metrics (%d)", p.name, g.Path, g.Port, p.path, port)
		}
	}
}

// testHostPaths: every host path the bridge needs is mounted at the same
// path, read-only where it only reads, and every path flag lies in one.
func testHostPaths(t *testing.T, pod *podSpec, bridge *container, f map[string]string) {
	for _, w := range []struct {
		path     string
		readOnly bool
	}{
		{"/var/lib/kubelet/device-plugins", false}, {"/var/lib/kubelet/pod-resources", true},
		{"/opt/cdi/bin", true}, {"/etc/cdi", true}, {"/var/lib/cdi", false}, {"/dev", true}, {"/sys", true},
		{"/var/run/cdi", false},
	} {
		host, ro := pod.hostPathAt(bridge, w.path)
		if host != w.path || ro != w.readOnly {
			t.Errorf("%s: mounted from host path %q read-only %v, want %q read-only %v", w.path, host, ro, w.path, w.readOnly)
		}
	}
	// /dev and /sys have other file systems mounted below them (the host's
	// /dev/shm, cgroups) that read-only alone would leave writable.
	for _, m := range bridge.VolumeMounts {
		if (m.MountPath == "/dev" || m.MountPath == "/sys") && m.RecursiveReadOnly != "IfPossible" {
			t.Errorf("%s: recursiveReadOnly %q, want IfPossible", m.MountPath, m.RecursiveReadOnly)
		}
	}
	dirs := strings.Split(f["plugin-path"], ":")
	dirs = append(dirs, f["conf-dir"], f["device-plugin-dir"], filepath.Dir(f["pod-resources-socket"]), f["cdi-spec-dir"])
	for _, d := range dirs {
		if host, _ := pod.hostPathAt(bridge, d); host != d {
			t.Errorf("the bridge's %s is host path %q, want the host's own %s", d, host, d)
		}
	}
}

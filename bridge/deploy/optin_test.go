package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cdiexec/cdi/bridge/deploy/internal/helmchart"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// TestOptInDropIns: the chart's defaults offer no virtual console and no
// camera; enabled, each is a chart drop-in its plugin runs as asked, and
// cameras enabled without the operator's own endpoints do not render.
func TestOptInDropIns(t *testing.T) {
	needHelm(t)
	t.Run("off by default", func(t *testing.T) {
		docs, objs := helmTemplate(t)
		for _, d := range docs {
			for _, s := range []string{"tty.d", "camera.d", "num_system_reserved", "192.0.2."} {
				if strings.Contains(d.Text, s) {
					t.Errorf("the default rendering's %s has %q", d.Source, s)
				}
			}
		}
		if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ConfigMap" }) {
			t.Error("the default rendering has a ConfigMap of drop-ins")
		}
		bridge := decodeDaemonSet(t, objs).Spec.Template.Spec.containerNamed(t, "bridge")
		if dirs := flags(t, "cdi-bridge", bridge.Args)["conf-dir"]; dirs != "/etc/cdi" {
			t.Errorf("--conf-dir=%s, want the host's /etc/cdi alone", dirs)
		}
	})
	t.Run("virtual consoles", testVirtualConsoles)
	t.Run("cameras", testCameras)
	t.Run("refused", testOptInRefused)
}

// optIn renders the chart with values and returns the chart's drop-ins,
// loaded as the bridge loads them, by type.
func optIn(t *testing.T, values string) map[string]*invoke.Conf {
	t.Helper()
	_, objs := helmTemplate(t, writeValues(t, values))
	pod := &decodeDaemonSet(t, objs).Spec.Template.Spec
	if dirs := flags(t, "cdi-bridge", pod.containerNamed(t, "bridge").Args)["conf-dir"]; dirs != "/etc/cdi:/etc/cdi-chart" {
		t.Errorf("--conf-dir=%s, want the chart's drop-ins after the host's", dirs)
	}
	confs, err := invoke.LoadAll(chartDropIns(t, objs, pod))
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string]*invoke.Conf{}
	for _, c := range confs {
		byType[c.Type] = c
	}
	return byType
}

// info runs conf's plugin's INFO as a node's bridge would, but with its
// state in a temporary directory and, where it has a root, at the
// fixture host; it returns the devices.
func info(t *testing.T, conf *invoke.Conf) []spec.DeviceInfo {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(conf.Bytes, &doc); err != nil {
		t.Fatal(err)
	}
	args, ok := doc["args"].(map[string]any)
	if !ok {
		t.Fatalf("%s has no args", conf.Path)
	}
	if root, ok := args["root"]; ok {
		if root != "/" {
			t.Errorf("args.root %v, want the host's /", root)
		}
		args["root"] = exectest.FixtureRoot(t)
	}
	if args["stateDir"] != "/var/lib/cdi" {
		t.Errorf("args.stateDir %v, want the DaemonSet's /var/lib/cdi", args["stateDir"])
	}
	args["stateDir"] = t.TempDir()
	r := exectest.Run(t, binPath(conf.Plugin), exectest.Env("CDI_COMMAND", "INFO", "CDI_VERSION", "0.1.0"), exectest.Marshal(t, doc))
	if r.Status != 0 {
		t.Fatalf("%s INFO: status %d, %s %s", conf.Plugin, r.Status, r.Stdout, r.Stderr)
	}
	var out spec.InfoResult
	r.Decode(t, &out)
	return out.Devices
}

func testVirtualConsoles(t *testing.T) {
	for _, tc := range []struct {
		values   string
		reserved int
	}{
		{"virtualConsoles: {enabled: true}", 12},
		{"virtualConsoles: {enabled: true, numSystemReserved: 40}", 40},
	} {
		t.Run(strconv.Itoa(tc.reserved), func(t *testing.T) {
			confs := optIn(t, tc.values)
			conf := confs["tty"]
			if len(confs) != 1 || conf == nil || conf.Plugin != "generic-tty" || filepath.Base(conf.Path) != "generic.conf" {
				t.Fatalf("drop-ins %v, want tty.d/generic.conf alone, for generic-tty", confs)
			}
			devs := info(t, conf)
			if len(devs) == 0 {
				t.Fatal("no terminal offered")
			}
			for _, d := range devs {
				if n, err := strconv.Atoi(strings.TrimPrefix(d.ID, "tty")); err != nil || n <= tc.reserved {
					t.Errorf("%s offered, with %d reserved", d.ID, tc.reserved)
				}
			}
		})
	}
}

// testCameras: the operator's endpoints, probed by default, so that one
// that does not answer is unhealthy; with the probe off it is offered.
func testCameras(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down.Close()
	endpoints := fmt.Sprintf(`[{id: up, url: "rtsp://%s/s", env: {CAMERA_CODEC: h264}}, {id: down, url: "rtsp://%s/s"}]`, up.Addr(), down.Addr())
	for _, tc := range []struct {
		name, values string
		capacity     int
		downHealthy  bool
	}{
		{"probed by default", "cameras: {enabled: true, endpoints: " + endpoints + "}", 4, false},
		{"probe off", "cameras: {enabled: true, capacity: 2, probe: {tcp: false}, endpoints: " + endpoints + "}", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			confs := optIn(t, tc.values)
			conf := confs["camera"]
			if len(confs) != 1 || conf == nil || conf.Plugin != "endpoint" || filepath.Base(conf.Path) != "endpoint.conf" {
				t.Fatalf("drop-ins %v, want camera.d/endpoint.conf alone, for endpoint", confs)
			}
			health := map[string]bool{}
			for _, d := range info(t, conf) {
				health[d.ID] = d.Healthy
				if d.Capacity != tc.capacity {
					t.Errorf("%s: capacity %d, want %d", d.ID, d.Capacity, tc.capacity)
				}
			}
			if want := map[string]bool{"up": true, "down": tc.downHealthy}; !equalJSON(health, want) {
				t.Errorf("health %v, want %v", health, want)
			}
		})
	}
}

// testOptInRefused: what an operator must fix is said by helm's message.
func testOptInRefused(t *testing.T) {
	for _, tc := range []struct{ name, values, message string }{
		{"cameras without endpoints", "cameras: {enabled: true}",
			"cameras.enabled: list your cameras in cameras.endpoints"},
		{"a camera without a url", "cameras: {enabled: true, endpoints: [{id: door}]}",
			"cameras.endpoints[0]: want {id, url}"},
		{"cameras and a dropIns camera.d/endpoint.conf", "cameras: {enabled: true, endpoints: [{id: a, url: 'rtsp://h/'}]}\ndropIns: {camera.d/endpoint.conf: '{}'}",
			"dropIns has a camera.d/endpoint.conf of its own"},
		{"virtual consoles and a dropIns tty.d/generic.conf", "virtualConsoles: {enabled: true}\ndropIns: {tty.d/generic.conf: '{}'}",
			"dropIns has a tty.d/generic.conf of its own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// helm's message is all a test has of a template's fail.
			_, err := helmchart.Template(t.Context(), chartDir, writeValues(t, tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("%v, want it refused with %q", err, tc.message)
			}
		})
	}
}

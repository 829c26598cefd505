package main

import (
	"reflect"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// plugin is the built endpoint binary, exec'd as a runtime would.
var plugin string

func TestMain(m *testing.M) {
	exectest.Main(m, "github.com/cdiexec/cdi/plugins/endpoint", &plugin)
}

// shippedConf is conf.d/camera.d/endpoint.conf with a fresh state
// directory. The shipped drop-in does not probe, so nothing here touches
// its documentation-range addresses.
func shippedConf(t *testing.T) []byte {
	doc := exectest.ShippedDropIn(t, "camera.d/endpoint.conf", t.TempDir())
	args := doc["args"].(map[string]any)
	if probe, _ := args["probe"].(map[string]any); probe["tcp"] != false {
		t.Fatalf("the shipped drop-in must not probe: %v", args["probe"])
	}
	return exectest.Marshal(t, doc)
}

func TestShippedConf(t *testing.T) {
	conf := shippedConf(t)
	t.Run("INFO", func(t *testing.T) {
		r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
		var info spec.InfoResult
		r.Decode(t, &info)
		// Two cameras of capacity 4: eight usage slots.
		if r.Status != 0 || !reflect.DeepEqual(info.Counts, map[string]int{"camera": 8}) || len(info.Devices) != 2 {
			t.Fatalf("status %d, %s", r.Status, r.Stdout)
		}
		for _, d := range info.Devices {
			if !d.Shared || len(d.DeviceNodes) != 0 || !d.Healthy || d.Capacity != 4 {
				t.Errorf("device %+v: want shared, healthy, no nodes, capacity 4", d)
			}
		}
	})
	t.Run("ADD both", func(t *testing.T) {
		r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "ADD", "CDI_REQUEST", "camera:2", "CDI_REQUEST_ID", "pod1"), conf)
		var res spec.AddResult
		r.Decode(t, &res)
		wantEnv := map[string]string{
			"CAMERA_URL":   "rtsp://192.0.2.10/stream1,rtsp://192.0.2.11:8554/live",
			"CAMERA_ID":    "lobby,loading-dock",
			"CAMERA_CODEC": "h264",
		}
		if r.Status != 0 || len(res.Devices) != 0 || r.Doc["devices"] == nil || !reflect.DeepEqual(res.Env, wantEnv) {
			t.Fatalf("status %d, %s; want no device nodes and env %v", r.Status, r.Stdout, wantEnv)
		}
	})
	t.Run("ADD in 0.0.1", func(t *testing.T) {
		r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "camera:1", "CDI_REQUEST_ID", "pod2"), conf)
		want := map[string]any{"cdiVersion": "0.0.1", "devices": []any{}}
		if r.Status != 0 || !reflect.DeepEqual(r.Doc, want) {
			t.Fatalf("status %d, %s; want %v", r.Status, r.Stdout, want)
		}
	})
}

// TestProbe runs INFO with the TCP probe against two loopback ports the
// test controls: one listening, one closed.
func TestProbe(t *testing.T) {
	openAddr, closedAddr := loopbackPorts(t)
	conf := exectest.Conf(t, "0.1.0", "camera", "endpoint", map[string]any{
		"stateDir": t.TempDir(), "probe": map[string]any{"tcp": true, "timeoutMs": 2000},
		"endpoints": []any{
			map[string]any{"id": "up", "url": "rtsp://" + openAddr + "/live"},
			map[string]any{"id": "down", "url": "rtsp://" + closedAddr + "/live"},
		},
	})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
	var info spec.InfoResult
	r.Decode(t, &info)
	if r.Status != 0 || info.Counts["camera"] != 1 || !info.Devices[0].Healthy || info.Devices[1].Healthy {
		t.Fatalf("status %d, %s; want only %q healthy", r.Status, r.Stdout, "up")
	}
	r = exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "ADD", "CDI_REQUEST", "camera:1", "CDI_REQUEST_ID", "x", "CDI_REQUEST_DEVICES", "down"), conf)
	if r.Status != 1 || r.Code() != int(spec.CodeInsufficientResources) {
		t.Fatalf("pinning an unhealthy endpoint: status %d, %s; want code %d", r.Status, r.Stdout, spec.CodeInsufficientResources)
	}
}

func TestInvalidEndpoints(t *testing.T) {
	conf := exectest.Conf(t, "0.1.0", "camera", "endpoint", map[string]any{
		"stateDir": t.TempDir(), "endpoints": []any{map[string]any{"id": "a", "url": "not a url"}},
	})
	r := exectest.Run(t, plugin, exectest.Env("CDI_VERSION", "0.1.0", "CDI_COMMAND", "INFO"), conf)
	if r.Status != 1 || r.Code() != int(spec.CodeInvalidConfig) {
		t.Fatalf("status %d, %s; want code %d", r.Status, r.Stdout, spec.CodeInvalidConfig)
	}
}

package node

import (
	"reflect"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/spec"
)

// camera is what the endpoint plugin's ADD returns for one camera.
func camera(id, url string, env map[string]string) *spec.AddResult {
	all := map[string]string{"CAMERA_ID": id, "CAMERA_URL": url}
	for k, v := range env {
		all[k] = v
	}
	return &spec.AddResult{Env: all}
}

// One container given several devices of one pool, one ADD per slot,
// sees every device's value, joined as one multi-device ADD joins them.
func TestContainerResponseJoinsEveryDevicesEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []*spec.AddResult
		want    map[string]string
	}{
		{"two cameras", []*spec.AddResult{
			camera("lobby", "rtsp://192.0.2.10/s", map[string]string{"CAMERA_CODEC": "h264"}),
			camera("dock", "rtsp://192.0.2.11/s", nil),
		}, map[string]string{"CAMERA_ID": "lobby,dock", "CAMERA_URL": "rtsp://192.0.2.10/s,rtsp://192.0.2.11/s", "CAMERA_CODEC": "h264"}},
		{"three cameras, one value shared", []*spec.AddResult{
			camera("a", "rtsp://a", map[string]string{"CAMERA_CODEC": "h264"}),
			camera("b", "rtsp://b", map[string]string{"CAMERA_CODEC": "h265"}),
			camera("c", "rtsp://c", map[string]string{"CAMERA_CODEC": "h264"}),
		}, map[string]string{"CAMERA_ID": "a,b,c", "CAMERA_URL": "rtsp://a,rtsp://b,rtsp://c", "CAMERA_CODEC": "h264,h265"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newContainerResponse()
			for i, r := range tc.results {
				c.add(r, nil, "cdi.test", "slot-"+string(rune('0'+i)), "")
			}
			if !reflect.DeepEqual(c.Envs, tc.want) {
				t.Errorf("env %v, want %v", c.Envs, tc.want)
			}
			if len(c.Annotations) != len(tc.results) {
				t.Errorf("annotations %v, want one slot annotation per device", c.Annotations)
			}
		})
	}
}

// Two slots of one device in one container (an Instance-level request
// for two) give its node, CDI name and mount once each; a node that the
// CDI name gives is no DeviceSpec, one it does not give is.
func TestContainerResponseGivesEachThingOnce(t *testing.T) {
	gpu := &cdiDevice{Name: "cdi.test/gpu-drm=0000:03:00.0", Nodes: []spec.DeviceNode{{HostPath: "/dev/dri/card1"}}}
	r := &spec.AddResult{
		DeviceNodes: []spec.DeviceNode{{HostPath: "/dev/dri/card1"}, {HostPath: "/dev/dri/renderD129", Permissions: "r"}},
		Mounts:      []spec.Mount{{HostPath: "/opt/lib", ContainerPath: "/usr/lib/gpu", ReadOnly: true}},
	}
	c := newContainerResponse()
	c.add(r, gpu, "cdi.test", "s-0", "")
	c.add(r, gpu, "cdi.test", "s-1", "")
	wantDevices := []*pluginapi.DeviceSpec{{HostPath: "/dev/dri/renderD129", ContainerPath: "/dev/dri/renderD129", Permissions: "r"}}
	if !reflect.DeepEqual(c.Devices, wantDevices) {
		t.Errorf("DeviceSpecs %v, want renderD129 alone (card1 comes by CDI)", c.Devices)
	}
	if len(c.CdiDevices) != 1 || c.CdiDevices[0].Name != gpu.Name {
		t.Errorf("CDI devices %v, want %s once", c.CdiDevices, gpu.Name)
	}
	if len(c.Mounts) != 1 {
		t.Errorf("mounts %v, want one", c.Mounts)
	}
}

// Without a CDI name, a 0.0.x result's host paths become DeviceSpecs.
func TestContainerResponseOldResult(t *testing.T) {
	c := newContainerResponse()
	c.add(&spec.AddResult{Devices: []string{"/dev/tty13"}}, nil, "cdi.test", "s", "7")
	want := []*pluginapi.DeviceSpec{{HostPath: "/dev/tty13", ContainerPath: "/dev/tty13", Permissions: "rw"}}
	if !reflect.DeepEqual(c.Devices, want) || c.Annotations["cdi.test/slot-s"] != "C:7:s" {
		t.Errorf("response %v", c.ContainerAllocateResponse.String())
	}
}

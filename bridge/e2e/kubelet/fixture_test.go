package kubelet

import (
	"fmt"
	"strings"

	"github.com/cdiexec/cdi/bridge/instance"
)

// device is one device the project's drop-ins find on the fixture host
// (testdata/README.md), written out here rather than asked of the
// plugins, so that a device the bridge drops or invents is noticed.
type device struct {
	pool     string // the Configuration-level resource, <resource-spec>-<drop-in>
	id       string
	capacity int64
	shared   bool
	// numa is the device's NUMA node; -1 when unknown.
	numa int64
	// nodes are the device nodes a container gets, in the plugin's order.
	nodes []string
	// env is what a container gets in its environment.
	env map[string]string
}

// instanceName is the device's Instance on this test's node.
func (d device) instanceName() string { return instance.Name(d.pool, d.id, nodeName, d.shared) }

// resource is the device's Instance-level resource.
func (d device) resource() string { return domain + "/" + d.instanceName() }

// cdiName is the CDI device name the bridge gives the device in the
// spec file of its pool: <domain>/<pool>=<id>. A device without nodes
// has none.
func (d device) cdiName() string {
	if len(d.nodes) == 0 {
		return ""
	}
	return domain + "/" + d.pool + "=" + d.id
}

func pool(name string) string { return domain + "/" + name }

// fixtureDevices lists every device of the fixture host.
func fixtureDevices() []device {
	var out []device
	for i := 13; i <= 44; i++ {
		out = append(out, device{pool: "tty-generic", id: fmt.Sprintf("tty%d", i), capacity: 1, numa: -1,
			nodes: []string{fmt.Sprintf("/dev/tty%d", i)}})
	}
	for _, g := range []struct {
		pci  string
		numa int64
		card int
	}{{"0000:00:02.0", -1, 0}, {"0000:03:00.0", 0, 1}, {"0000:41:00.0", 0, 2}, {"0000:81:00.0", 1, 3}} {
		out = append(out, device{pool: "gpu-drm", id: g.pci, capacity: 1, numa: g.numa,
			nodes: []string{fmt.Sprintf("/dev/dri/card%d", g.card), fmt.Sprintf("/dev/dri/renderD%d", 128+g.card)}})
	}
	for _, s := range []struct {
		name string
		numa int64
	}{{"ttyACM0", 0}, {"ttyUSB0", 0}, {"ttyUSB1", 1}} {
		out = append(out, device{pool: "dev-serial-generic", id: "serial-" + s.name, capacity: 1, numa: s.numa,
			nodes: []string{"/dev/" + s.name}})
	}
	for i := range 4 {
		out = append(out, device{pool: "dev-video-generic", id: fmt.Sprintf("video-video%d", i), capacity: 1, numa: -1,
			nodes: []string{fmt.Sprintf("/dev/video%d", i)}})
	}
	out = append(out, device{pool: "dev-sound-generic", id: "sound", capacity: 1, numa: -1,
		nodes: []string{"/dev/snd/controlC0", "/dev/snd/pcmC0D0c", "/dev/snd/pcmC0D0p", "/dev/snd/timer"}})
	out = append(out,
		device{pool: "camera-endpoint", id: "lobby", capacity: 4, shared: true, numa: -1,
			env: map[string]string{"CAMERA_ID": "lobby", "CAMERA_URL": "rtsp://192.0.2.10/stream1", "CAMERA_CODEC": "h264"}},
		device{pool: "camera-endpoint", id: "loading-dock", capacity: 4, shared: true, numa: -1,
			env: map[string]string{"CAMERA_ID": "loading-dock", "CAMERA_URL": "rtsp://192.0.2.11:8554/live"}})
	return out
}

// fixtureDevice returns the device with the given id.
func fixtureDevice(id string) device {
	for _, d := range fixtureDevices() {
		if d.id == id {
			return d
		}
	}
	panic("no fixture device " + id)
}

// deviceOfSlot returns the device whose Instance a slot id belongs to.
func deviceOfSlot(slot string) (device, bool) {
	for _, d := range fixtureDevices() {
		if strings.HasPrefix(slot, d.instanceName()+"-") {
			return d, true
		}
	}
	return device{}, false
}

// baseline is what the manager reports with nothing allocated: every
// Instance-level resource with its capacity in slots, every
// Configuration-level one with one virtual device per device (a
// placeholder for each device with a free slot), all healthy.
func baseline() map[string]counts {
	out := map[string]counts{}
	for _, d := range fixtureDevices() {
		out[d.resource()] = counts{d.capacity, d.capacity}
		c := out[pool(d.pool)]
		out[pool(d.pool)] = counts{c.capacity + 1, c.allocatable + 1}
	}
	return out
}

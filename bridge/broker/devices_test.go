package broker

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
)

// A device is there while a node sees it, and not every node that sees
// it says it has none allocatable; a local one has that node.
func TestFromInstances(t *testing.T) {
	allocatable := map[string]int64{"n1/cdi.local/cam-1": 0, "n1/cdi.local/cam-3": 0, "n2/cdi.local/cam-3": 0, "n1/cdi.local/tty-1": 1}
	got := fromInstances([]instance.Instance{
		{Name: "cam-1", Config: "cam", DeviceID: "door", Shared: true, Nodes: []string{"n1", "n2"}, Capacity: 2},
		{Name: "cam-2", Config: "cam", DeviceID: "gate", Shared: true, Capacity: 2},
		{Name: "cam-3", Config: "cam", DeviceID: "yard", Shared: true, Nodes: []string{"n1", "n2"}, Capacity: 2},
		{Name: "tty-1", Config: "tty", DeviceID: "tty13", Nodes: []string{"n1"}, Capacity: 1},
	}, "cdi.local", func(node, res string) (int64, bool) {
		n, ok := allocatable[node+"/"+res]
		return n, ok
	})
	if len(got["cam"]) != 1 || got["cam"][0].ID != "door" || got["cam"][0].Node != "" {
		t.Errorf("cameras %+v, want door alone (gate no node sees, yard no node has healthy), of no one node", got["cam"])
	}
	if len(got["tty"]) != 1 || got["tty"][0].Node != "n1" || got["tty"][0].Key != "tty-1" {
		t.Errorf("terminals %+v", got["tty"])
	}
}

func sliceOf(node string, pool string, gen int64, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "cdi.local", Devices: devices,
		Pool: resourceapi.ResourcePool{Name: pool, Generation: gen, ResourceSliceCount: 1}}}
	if node != "" {
		s.Spec.NodeName = ptr.To(node)
	}
	return s
}

func published(pool, id string, props map[string]string, slots int64) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		dradevices.AttrPool: {StringValue: ptr.To(pool)}, dradevices.AttrID: {StringValue: ptr.To(id)},
		dradevices.AttrResource: {StringValue: ptr.To("tty")}, dradevices.AttrNUMANode: {IntValue: ptr.To(int64(0))},
	}
	for k, v := range props {
		attrs[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
	}
	d := resourceapi.Device{Name: dradevices.DeviceName(id), Attributes: attrs}
	if slots > 0 {
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{dradevices.CapacitySlots: {Value: *resource.NewQuantity(slots, resource.DecimalSI)}}
	}
	return d
}

// The devices of DRA pools come from the newest generation of each
// DRA pool: one per node for a local device of one id, one for a shared
// device; other drivers' and other pools' devices are not read.
func TestFromSlices(t *testing.T) {
	slices_ := []*resourceapi.ResourceSlice{
		sliceOf("n1", "n1/tty-generic", 2, published("tty-generic", "tty13", map[string]string{"line": "a"}, 0)),
		sliceOf("n1", "n1/tty-generic", 1, published("tty-generic", "tty14", nil, 0)),
		sliceOf("n2", "n2/tty-generic", 1, published("tty-generic", "tty13", nil, 0)),
		sliceOf("", "camera-endpoint", 1, published("camera-endpoint", "door", nil, 4)),
		sliceOf("n1", "n1/gpu-drm", 1, published("gpu-drm", "0000:01:00.0", nil, 0)),
	}
	other := sliceOf("n1", "n1/x", 1, published("tty-generic", "tty15", nil, 0))
	other.Spec.Driver = "gpu.example.com"
	got := fromSlices(append(slices_, other), "cdi.local", map[string]bool{"tty-generic": true, "camera-endpoint": true})
	var ttys []string
	for _, d := range got["tty-generic"] {
		ttys = append(ttys, d.Node+"/"+d.ID)
	}
	slices.Sort(ttys)
	if !slices.Equal(ttys, []string{"n1/tty13", "n2/tty13"}) {
		t.Errorf("terminals %v, want tty13 of n1 and n2 (tty14 is of an old generation, tty15 another driver's)", ttys)
	}
	if d := got["tty-generic"]; len(d) > 0 && d[0].Key == d[len(d)-1].Key {
		t.Error("one key for two nodes' terminals")
	}
	cams := got["camera-endpoint"]
	if len(cams) != 1 || !cams[0].Shared || cams[0].Capacity != 4 || cams[0].Key != instance.Name("camera-endpoint", "door", "", true) {
		t.Errorf("cameras %+v", cams)
	}
	for _, d := range got["tty-generic"] {
		if d.Node == "n1" && (d.Properties["line"] != "a" || len(d.Properties) != 1) {
			t.Errorf("properties %v, want line=a alone", d.Properties)
		}
	}
	if _, ok := got["gpu-drm"]; ok {
		t.Error("a pool not served through DRA read from the slices")
	}
}

func TestSelector(t *testing.T) {
	d := Device{ID: "door", Properties: map[string]string{"site": "lab", "floor": "1"}}
	for _, tc := range []struct {
		s    *Selector
		want bool
	}{
		{nil, true},
		{&Selector{}, true},
		{&Selector{DeviceIDs: []string{"gate", "door"}}, true},
		{&Selector{DeviceIDs: []string{"gate"}}, false},
		{&Selector{Properties: map[string]string{"site": "lab"}}, true},
		{&Selector{Properties: map[string]string{"site": "lab", "floor": "2"}}, false},
		{&Selector{Properties: map[string]string{"zone": ""}}, false},
	} {
		if got := tc.s.selects(d); got != tc.want {
			t.Errorf("%+v selects %+v: %v, want %v", tc.s, d, got, tc.want)
		}
	}
}

// A claimed slot changes no fingerprint; a device's coming, going or
// change of properties does.
func TestFingerprints(t *testing.T) {
	base := map[string][]Device{"cam": {camera("lobby", nil)}, "tty": {{Key: "t", ID: "tty13", Node: "n1", Capacity: 1}}}
	before := fingerprints(base)
	if got := changedPools(before, fingerprints(base)); len(got) != 0 {
		t.Errorf("nothing changed, and %v did", got)
	}
	moved := map[string][]Device{"cam": {camera("lobby", map[string]string{"site": "lab"})}}
	if got := changedPools(before, fingerprints(moved)); !slices.Equal(got, []string{"cam", "tty"}) {
		t.Errorf("changed %v, want cam (a property) and tty (gone)", got)
	}
}

package dradevices

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

func gpuPool(devs ...spec.DeviceInfo) discovery.Pool {
	conf := &invoke.Conf{Path: "/etc/cdi/gpu.d/drm.conf", Config: spec.Config{Type: "gpu", Args: []byte(`{"cdiKind":"example.com/gpu"}`)}}
	return discovery.Pool{Name: "gpu-drm", Resource: "gpu", Conf: conf, Devices: devs}
}

func numa(n int) *int { return &n }

// An unhealthy device stays, tainted <driver>/unhealthy with why and
// its drop-in's effect; a shared one is left out.
func TestResourcesTaintsUnhealthyLeavesOutShared(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dra     string // the drop-in's "dra" member
		infoErr error
		effect  resourceapi.DeviceTaintEffect
		why     string
	}{
		{"default", "", nil, resourceapi.DeviceTaintEffectNoSchedule, UnhealthyReported},
		{"NoExecute", `{"unhealthyTaintEffect":"NoExecute"}`, nil, resourceapi.DeviceTaintEffectNoExecute, UnhealthyReported},
		{"a misspelt effect", `{"unhealthyTaintEffect":"NoExec"}`, nil, resourceapi.DeviceTaintEffectNoSchedule, UnhealthyReported},
		// A failed INFO says nothing of the devices: evicting every pod
		// of the drop-in for it would be worse than the failure.
		{"NoExecute, INFO failed", `{"unhealthyTaintEffect":"NoExecute"}`, errors.New("timed out"),
			resourceapi.DeviceTaintEffectNoSchedule, UnhealthyInfoFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := gpuPool(
				spec.DeviceInfo{ID: "0000:01:00.0", Resource: "gpu", Healthy: true, Capacity: 1},
				spec.DeviceInfo{ID: "0000:02:00.0", Resource: "gpu", Healthy: false, Capacity: 1},
				spec.DeviceInfo{ID: "cam", Resource: "gpu", Healthy: true, Shared: true, Capacity: 1},
			)
			if tc.dra != "" {
				p.Conf.Bytes = []byte(`{"cdiVersion":"0.1.0","name":"n","type":"gpu","plugin":"drm","dra":` + tc.dra + `}`)
			}
			if tc.infoErr != nil { // the devices as INFO last listed them, all unhealthy
				p.Err, p.Devices[0].Healthy = tc.infoErr, false
			}
			res := Resources("cdi.test", "node-a", []discovery.Pool{p}, nil)
			pool, ok := res.Pools["node-a/gpu-drm"]
			if !ok || len(res.Pools) != 1 {
				t.Fatalf("pools %v, want node-a/gpu-drm only", res.Pools)
			}
			if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 2 {
				t.Fatalf("slices %+v, want one with the two devices of the node", pool.Slices)
			}
			healthy, sick := pool.Slices[0].Devices[0], pool.Slices[0].Devices[1]
			if healthy.Name != DeviceName("0000:01:00.0") || (len(healthy.Taints) != 0) != (tc.infoErr != nil) {
				t.Errorf("device %s, taints %v: want the first, untainted unless INFO failed", healthy.Name, healthy.Taints)
			}
			want := resourceapi.DeviceTaint{Key: "cdi.test/unhealthy", Value: tc.why, Effect: tc.effect}
			if sick.Name != DeviceName("0000:02:00.0") || len(sick.Taints) != 1 || sick.Taints[0] != want {
				t.Errorf("device %s, taints %+v: want the unhealthy one, tainted %+v", sick.Name, sick.Taints, want)
			}
		})
	}
}

func TestResourcesSlices(t *testing.T) {
	for _, tc := range []struct {
		devices int
		want    []int // devices per slice
	}{
		{0, []int{0}},
		{1, []int{1}},
		{64, []int{64}},
		{300, []int{64, 64, 64, 64, 44}},
	} {
		t.Run(fmt.Sprint(tc.devices), func(t *testing.T) {
			var devs []spec.DeviceInfo
			for i := range tc.devices {
				devs = append(devs, spec.DeviceInfo{ID: fmt.Sprintf("tty%d", i), Resource: "gpu", Healthy: true, Capacity: 1})
			}
			slices := Resources("cdi.test", "n", []discovery.Pool{gpuPool(devs...)}, nil).Pools["n/gpu-drm"].Slices
			var got []int
			for _, s := range slices {
				got = append(got, len(s.Devices))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("devices per slice %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDeviceCapacity(t *testing.T) {
	for _, tc := range []struct {
		capacity int
		multiple bool
	}{{0, false}, {1, false}, {4, true}} {
		t.Run(fmt.Sprint(tc.capacity), func(t *testing.T) {
			d := Device(gpuPool(), spec.DeviceInfo{ID: "g", Resource: "gpu", Healthy: true, Capacity: tc.capacity})
			multiple := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
			if multiple != tc.multiple {
				t.Fatalf("allowMultipleAllocations %v, want %v", multiple, tc.multiple)
			}
			slots, ok := d.Capacity[CapacitySlots]
			if ok != tc.multiple {
				t.Fatalf("capacity %v, want slots only with multiple allocations", d.Capacity)
			}
			if ok && (slots.Value.Value() != int64(tc.capacity) || slots.RequestPolicy.Default.Value() != 1 ||
				len(slots.RequestPolicy.ValidValues) != 1 || slots.RequestPolicy.ValidValues[0].Value() != 1) {
				t.Errorf("slots %+v, want %d of which an allocation takes exactly 1", slots, tc.capacity)
			}
		})
	}
}

func TestDeviceAttributes(t *testing.T) {
	props := map[string]string{
		"pciAddress": "0000:01:00.0", "vendor": "0x8086",
		"bad-name": "x", "id": "not the id", "long": string(make([]byte, 65)),
	}
	d := Device(gpuPool(), spec.DeviceInfo{ID: "0000:01:00.0", Resource: "gpu", Healthy: true, NUMANode: numa(1), Properties: props})
	want := map[resourceapi.QualifiedName]string{
		AttrID: "0000:01:00.0", AttrResource: "gpu", AttrPool: "gpu-drm", AttrCDIKind: "example.com/gpu",
		"pciAddress": "0000:01:00.0", "vendor": "0x8086",
	}
	for name, v := range want {
		if a, ok := d.Attributes[name]; !ok || a.StringValue == nil || *a.StringValue != v {
			t.Errorf("attribute %s = %+v, want %q", name, a, v)
		}
	}
	if a := d.Attributes[AttrNUMANode]; a.IntValue == nil || *a.IntValue != 1 {
		t.Errorf("numaNode = %+v, want 1", a)
	}
	if len(d.Attributes) != len(want)+1 {
		t.Errorf("attributes %v: a property that is no C identifier, a taken name or too long a value is left out", d.Attributes)
	}
}

func TestDeviceAttributesLimit(t *testing.T) {
	props := map[string]string{}
	for i := range 40 {
		props[fmt.Sprintf("p%02d", i)] = "v"
	}
	d := Device(gpuPool(), spec.DeviceInfo{ID: "g", Resource: "gpu", Healthy: true, Capacity: 2, Properties: props})
	if n := len(d.Attributes) + len(d.Capacity); n != resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("%d attributes and capacities, want the API's limit %d", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
}

func TestCDIKindDefault(t *testing.T) {
	p := gpuPool()
	p.Conf.Args = nil
	if got := cdiKind(p); got != "cdi.local/gpu" {
		t.Errorf("cdiKind = %q, want the plugins' default cdi.local/gpu", got)
	}
}

// One device turning unhealthy changes its own slice only, by its taint:
// the others keep their devices, so the publisher rewrites one slice, not
// the pool. Every slice stays within the API's limit for slices with
// taints.
func TestUnhealthyDeviceChangesOneSlice(t *testing.T) {
	devs := make([]spec.DeviceInfo, 300)
	for i := range devs {
		devs[i] = spec.DeviceInfo{ID: fmt.Sprintf("tty%d", i), Resource: "gpu", Healthy: true, Capacity: 1}
	}
	before := Resources("cdi.test", "n", []discovery.Pool{gpuPool(devs...)}, nil).Pools["n/gpu-drm"].Slices
	devs[5].Healthy = false
	after := Resources("cdi.test", "n", []discovery.Pool{gpuPool(devs...)}, nil).Pools["n/gpu-drm"].Slices
	if len(after) != len(before) {
		t.Fatalf("%d slices after, %d before", len(after), len(before))
	}
	var changed []int
	for i := range after {
		if !reflect.DeepEqual(after[i], before[i]) {
			changed = append(changed, i)
		}
	}
	if !slices.Equal(changed, []int{0}) {
		t.Errorf("slices %v changed, want [0] only", changed)
	}
	for i, sl := range after {
		if n := len(sl.Devices); n > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %d holds %d devices, more than a slice with taints may", i, n)
		}
	}
	if d := after[0].Devices[5]; d.Name != "tty5" || len(d.Taints) != 1 {
		t.Errorf("device 5 of the first slice is %s with taints %v, want tty5 tainted", d.Name, d.Taints)
	}
}

// A device another front end's allocations hold is left out, in its
// place: its slice loses it, the others keep theirs.
func TestResourcesLeavesOutWithheld(t *testing.T) {
	devs := make([]spec.DeviceInfo, 100)
	for i := range devs {
		devs[i] = spec.DeviceInfo{ID: fmt.Sprintf("tty%d", i), Resource: "gpu", Healthy: true, Capacity: 1}
	}
	all := Resources("cdi.test", "n", []discovery.Pool{gpuPool(devs...)}, nil).Pools["n/gpu-drm"].Slices
	held := map[string]map[string]bool{"gpu-drm": {"tty3": true}}
	some := Resources("cdi.test", "n", []discovery.Pool{gpuPool(devs...)}, held).Pools["n/gpu-drm"].Slices
	if len(all) != 2 || len(some) != 2 || len(some[0].Devices) != len(all[0].Devices)-1 || !reflect.DeepEqual(some[1], all[1]) {
		t.Fatalf("slices of %v and %v devices, want the first one short", lens(some), lens(all))
	}
	for _, d := range some[0].Devices {
		if d.Name == "tty3" {
			t.Error("tty3, withheld, is published")
		}
	}
}

func lens(slices []resourceslice.Slice) []int {
	var out []int
	for _, s := range slices {
		out = append(out, len(s.Devices))
	}
	return out
}

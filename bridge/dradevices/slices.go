package dradevices

import (
	"regexp"
	"sort"

	"github.com/tidwall/gjson"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/spec"
)

// Attribute and capacity names of the published devices. Unqualified,
// they are in the driver's domain (the bridge's --domain): a CEL selector
// reads them as device.attributes["cdi.local"].numaNode.
const (
	AttrID       = "id"       // the inventory id, as CDI_REQUEST_DEVICES names it
	AttrResource = "resource" // the resource-spec, e.g. "gpu"
	// AttrPool is the bridge's pool, e.g. "gpu-drm": the device plugins'
	// resource <domain>/<pool>, which a DeviceClass's extendedResourceName
	// can name so that pods asking for it the old way are served by DRA.
	AttrPool     = "pool"
	AttrNUMANode = "numaNode" // an int; absent where the plugin does not know it
	AttrCDIKind  = "cdiKind"  // the drop-in's args.cdiKind, as the plugin names its devices
	// CapacitySlots is the usage slots of a device of capacity > 1; every
	// allocation consumes exactly one.
	CapacitySlots = "slots"
)

// Limits of the resource.k8s.io/v1 API that shape what is published. A
// slice of which any device has a taint holds at most 64 devices, where
// one without may hold 128; every device of a node's pool may be tainted
// (TaintUnhealthy), so its slices hold 64. The shared pools' devices are
// never tainted.
const (
	maxDevicesPerSlice        = resourceapi.ResourceSliceMaxDevices
	maxDevicesPerTaintedSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	maxAttrsPerDevice         = resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice
	maxAttrStringLength       = resourceapi.DeviceAttributeMaxValueLength
	maxAttrNameLength         = resourceapi.DeviceMaxIDLength
)

// cIdentifier is what an attribute's name within a domain must be.
var cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Resources is what node publishes for pools as driver: one DRA pool
// per pool of the bridge (PoolName), every device of it but those
// withheld (by pool, the devices another front end's allocations hold:
// Preparer.Withheld) in slices of at most 64, an unhealthy one with the
// taint <driver>/unhealthy
// (TaintUnhealthy), of the effect its drop-in asks for (NoSchedule unless
// DropInSettings say NoExecute): the scheduler allocates it to no claim
// that does not tolerate the taint, an operator sees it and why, and a
// claim allocated before keeps its allocation (with NoExecute, its pod
// is evicted). Its Prepare fails while the device is unhealthy (the
// plugin refuses it).
//
// Left out: a shared device (a network camera every node sees). Published
// by each node it would be allocated once per node, over its capacity.
// The elected bridge publishes it once for the cluster instead
// (SharedResources), from what every node's Presence says it sees.
func Resources(driver, node string, pools []discovery.Pool, withheld map[string]map[string]bool) resourceslice.DriverResources {
	out := resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(pools))}
	for _, p := range pools {
		local := make([]spec.DeviceInfo, 0, len(p.Devices))
		for _, d := range p.Devices {
			if !d.Shared {
				local = append(local, d)
			}
		}
		out.Pools[PoolName(node, p.Name)] = resourceslice.Pool{Slices: chunkInPlace(driver, p, local, withheld[p.Name])}
	}
	return out
}

// chunkInPlace splits devices into slices the API accepts, each slice
// holding its run of maxDevicesPerTaintedSlice devices but those
// withheld, the unhealthy ones tainted. A device's slice is decided by
// its place among all of them, so that one device turning unhealthy (or
// healthy again, or withheld) changes one slice: the publishing library keeps a pool's generation only for a
// change of one slice, and rewrites every slice of the pool under a new
// generation for more (bridge/SCALING.md, "Through DRA"). A pool with no
// device is one empty slice: "no devices" is news to the scheduler, "no
// pool" would leave it the last slices it saw.
func chunkInPlace(driver string, p discovery.Pool, devices []spec.DeviceInfo, withheld map[string]bool) []resourceslice.Slice {
	set, _ := DropInSettings(p.Conf)
	slices := []resourceslice.Slice{}
	for start := 0; start == 0 || start < len(devices); start += maxDevicesPerTaintedSlice {
		run := devices[start:min(start+maxDevicesPerTaintedSlice, len(devices))]
		s := resourceslice.Slice{Devices: make([]resourceapi.Device, 0, len(run))}
		for _, d := range run {
			if withheld[d.ID] {
				continue
			}
			dev := Device(p, d)
			if !d.Healthy {
				dev.Taints = []resourceapi.DeviceTaint{UnhealthyTaint(driver, p, d, set.UnhealthyEffect)}
			}
			s.Devices = append(s.Devices, dev)
		}
		slices = append(slices, s)
	}
	return slices
}

// chunk splits devices into slices the API accepts, as they come.
func chunk(devices []resourceapi.Device) []resourceslice.Slice {
	slices := []resourceslice.Slice{}
	for len(devices) > maxDevicesPerSlice {
		slices = append(slices, resourceslice.Slice{Devices: devices[:maxDevicesPerSlice]})
		devices = devices[maxDevicesPerSlice:]
	}
	return append(slices, resourceslice.Slice{Devices: devices})
}

// Device is d of pool p as a DRA device.
//
// A device of capacity > 1 has consumable capacity: allowMultipleAllocations
// and a "slots" capacity of that many, of which every allocation takes
// exactly one (DRAConsumableCapacity, beta and on by default at 1.36).
// The alternative, one DRA device per slot, was not taken: it multiplies
// the slice by the capacity, and a claim for two devices could get two
// slots of one device, which a matchAttribute or distinctAttribute
// constraint then has to rule out; with capacity the scheduler counts the
// slots, as the Instance store does for the device plugins, and every
// attribute describes a real device. A device of capacity 1 is a plain
// device, for schedulers without the feature.
func Device(p discovery.Pool, d spec.DeviceInfo) resourceapi.Device {
	dev := resourceapi.Device{Name: DeviceName(d.ID), Attributes: attributes(p, d)}
	if d.Capacity > 1 {
		one := resource.MustParse("1")
		dev.AllowMultipleAllocations = ptr.To(true)
		dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacitySlots: {
				Value:         *resource.NewQuantity(int64(d.Capacity), resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &one, ValidValues: []resource.Quantity{one}},
			},
		}
	}
	return dev
}

// attributes are d's id, resource-spec, pool, NUMA node and CDI kind, then its
// properties as strings, in name order, while the API's limit of
// attributes per device allows. A property whose name is not a C
// identifier, or one of the names above, or whose value is longer than an
// attribute's, is left out: it remains on the plugin's INFO.
func attributes(p discovery.Pool, d spec.DeviceInfo) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrResource: {StringValue: ptr.To(d.Resource)},
		AttrPool:     {StringValue: ptr.To(p.Name)},
		AttrCDIKind:  {StringValue: ptr.To(cdiKind(p))},
	}
	if len(d.ID) <= maxAttrStringLength {
		attrs[AttrID] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.ID)}
	}
	if d.NUMANode != nil {
		attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(*d.NUMANode))}
	}
	keys := make([]string, 0, len(d.Properties))
	for k := range d.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	room := maxAttrsPerDevice - len(attrs) - 1 // one for the slots capacity
	for _, k := range keys {
		v := d.Properties[k]
		if _, taken := attrs[resourceapi.QualifiedName(k)]; taken || room == 0 ||
			!cIdentifier.MatchString(k) || len(k) > maxAttrNameLength || len(v) > maxAttrStringLength {
			continue
		}
		attrs[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
		room--
	}
	return attrs
}

// cdiKind is the kind the pool's plugin names its devices by: its
// drop-in's args.cdiKind, else the plugins' default cdi.local/<type>.
func cdiKind(p discovery.Pool) string {
	if p.Conf == nil {
		return ""
	}
	if k := gjson.GetBytes(p.Conf.Args, "cdiKind"); k.Type == gjson.String {
		return k.String()
	}
	return "cdi.local/" + p.Conf.Type
}

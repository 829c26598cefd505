package spec

import (
	"fmt"
	"sort"
	"time"

	"github.com/tidwall/gjson"

	"github.com/cdiexec/cdi/spec/jsonread"
	"github.com/cdiexec/cdi/spec/jsonwrite"
)

// InventoryKey is the INFO result member that carries the 0.1.0 inventory.
// Its underscore keeps it out of the resource-spec namespace, so it can
// never collide with a flat count.
const InventoryKey = "device_inventory"

// VersionResult is the reply to VERSION.
type VersionResult struct {
	CDIVersion        string   `json:"cdiVersion"`
	SupportedVersions []string `json:"supportedVersions"`
	// PluginVersion is the plugin binary's build (spec/buildinfo): which
	// release or commit answers. Informational; "" is left out.
	PluginVersion string `json:"pluginVersion,omitempty"`
}

// InfoResult is the reply to INFO: a flat count per resource-spec and, from
// 0.1.0, the device inventory. On the wire the counts are members of the
// top-level object beside cdiVersion.
type InfoResult struct {
	CDIVersion string
	// Counts maps each resource-spec to the usage slots of its healthy
	// devices: the node's total offer, not reduced by allocations.
	Counts map[string]int
	// Devices is the 0.1.0 inventory.
	Devices []DeviceInfo
}

// DeviceInfo describes one device in the 0.1.0 inventory.
type DeviceInfo struct {
	ID          string            `json:"id"`
	Resource    string            `json:"resource"`
	DeviceNodes []DeviceNode      `json:"deviceNodes"`
	NUMANode    *int              `json:"numaNode,omitempty"`
	Healthy     bool              `json:"healthy"`
	Capacity    int               `json:"capacity"`
	Used        int               `json:"used"`
	Shared      bool              `json:"shared"`
	Properties  map[string]string `json:"properties,omitempty"`
}

// DeviceNode is a device node as a container gets it.
type DeviceNode struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath,omitempty"`
	// Permissions is the cgroup access string: a combination of r, w, m.
	Permissions string `json:"permissions,omitempty"`
}

// Mount is a host path bind-mounted into the container.
type Mount struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// Unit records which device slot one requested unit took.
type Unit struct {
	Resource string `json:"resource"`
	Device   string `json:"device"`
	Slot     int    `json:"slot"`
}

// AddResult is the reply to ADD. Devices is always present, even empty.
// The fields after NUMALocality are 0.1.0 and dropped for older versions.
type AddResult struct {
	CDIVersion   string   `json:"cdiVersion"`
	Devices      []string `json:"devices"`
	NUMALocality []int    `json:"numa_locality,omitempty"`

	DeviceNodes []DeviceNode      `json:"deviceNodes,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Mounts      []Mount           `json:"mounts,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	CDIDevices  []string          `json:"cdiDevices,omitempty"`
	Units       []Unit            `json:"units,omitempty"`
}

// Allocation is one entry of LIST: a request-id, the request it was made
// with, and the result ADD returned for it.
type Allocation struct {
	RequestID string    `json:"requestId"`
	Request   string    `json:"request"`
	Created   time.Time `json:"created"`
	Result    AddResult `json:"result"`
}

// ListResult is the reply to LIST (0.1.0).
type ListResult struct {
	CDIVersion  string       `json:"cdiVersion"`
	Allocations []Allocation `json:"allocations"`
}

// GCResult is the reply to GC (0.1.0): the request-ids it released.
type GCResult struct {
	CDIVersion string   `json:"cdiVersion"`
	Released   []string `json:"released"`
}

// ForVersion returns a copy of r fit for version v: the 0.1.0 members are
// dropped for older versions, and Devices is never null.
func (r AddResult) ForVersion(v string) AddResult {
	r.CDIVersion = v
	if r.Devices == nil {
		r.Devices = []string{}
	}
	if !AtLeast(v, Version010) {
		r = AddResult{CDIVersion: v, Devices: r.Devices, NUMALocality: r.NUMALocality}
	}
	return r
}

// ForVersion returns a copy of r fit for version v: the inventory is
// dropped for versions before 0.1.0.
func (r InfoResult) ForVersion(v string) InfoResult {
	r.CDIVersion = v
	if !AtLeast(v, Version010) {
		r.Devices = nil
	} else if r.Devices == nil {
		r.Devices = []DeviceInfo{}
	}
	return r
}

// MarshalJSON writes the counts beside cdiVersion and the inventory, if
// any, under InventoryKey, all in key order.
func (r InfoResult) MarshalJSON() ([]byte, error) {
	doc := make(map[string]any, len(r.Counts)+2)
	for k, n := range r.Counts {
		doc[k] = n
	}
	doc["cdiVersion"] = r.CDIVersion
	if r.Devices != nil {
		doc[InventoryKey] = r.Devices
	}
	return jsonwrite.Marshal(doc)
}

// UnmarshalJSON reads what MarshalJSON writes. Members other than
// cdiVersion and the inventory must be integer counts.
func (r *InfoResult) UnmarshalJSON(data []byte) error {
	v, err := jsonread.Parse(data)
	if err != nil {
		return fmt.Errorf("INFO result: %w", err)
	}
	if !v.IsObject() {
		return fmt.Errorf("INFO result: %w: want an object, got %.40s", jsonread.ErrType, v.Raw)
	}
	var fixed struct {
		CDIVersion string       `json:"cdiVersion"`
		Devices    []DeviceInfo `json:"device_inventory"`
	}
	if err := jsonread.Read(v, &fixed); err != nil {
		return fmt.Errorf("INFO result: %w", err)
	}
	counts := map[string]int{}
	v.ForEach(func(k, n gjson.Result) bool {
		if name := k.String(); name != "cdiVersion" && name != InventoryKey {
			var c int
			if err = jsonread.Read(n, &c); err != nil {
				err = fmt.Errorf("INFO result: %w", jsonread.At(name, err))
			}
			counts[name] = c
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	*r = InfoResult{CDIVersion: fixed.CDIVersion, Counts: counts, Devices: fixed.Devices}
	return nil
}

// SortedSpecs returns the keys of r.Counts in order, for stable display.
func (r InfoResult) SortedSpecs() []string {
	keys := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

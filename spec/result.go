package spec

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/cdiexec/cdi/spec/jsonread"
	"github.com/cdiexec/cdi/spec/jsonwrite"
)

// InventoryKey is the INFO result member that carries the 0.1.0 inventory.
// Its underscore keeps it out of the resource-spec namespace, so it can
// never collide with a flat count.
const InventoryKey = "device_inventory"

// SkippedKey is the INFO result member (0.2.0) that counts, by reason, the
// devices the plugin found but does not offer; an underscore, as in
// InventoryKey, keeps it apart from the counts.
const SkippedKey = "skipped_devices"

// Reasons for skipped_devices that SPEC.md names, for the causes this
// project's plugins skip a device for. A plugin may use others of the
// same form (CheckSkipReason).
const (
	// SkipBadPath: a node's path is not clean and absolute, or holds a
	// control character.
	SkipBadPath = "bad-path"
	// SkipNotDeviceNode: a node is a regular file, a FIFO, a socket or a
	// directory, or a link to one.
	SkipNotDeviceNode = "not-device-node"
	// SkipOutsideRoot: a node resolves out of the root arg.
	SkipOutsideRoot = "outside-root"
	// SkipBadID: the device's id would not be a valid device-id (a name
	// too long, a character an id cannot hold), or another device has it.
	SkipBadID = "bad-id"
	// SkipUnreadable: what describes the device cannot be read.
	SkipUnreadable = "unreadable"
)

// MaxSkipReasons bounds the reasons of one skipped_devices, so that a
// caller can make a metric series of each.
const MaxSkipReasons = 16

// maxSkipReasonLen is the longest reason, in bytes.
const maxSkipReasonLen = 32

// CheckSkipReason reports whether s is a reason of skipped_devices: a
// lower-case letter followed by up to 31 lower-case letters, digits or
// hyphens.
func CheckSkipReason(s string) error {
	lowerDigitHyphen := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' }
	if s == "" || s[0] < 'a' || s[0] > 'z' || len(s) > maxSkipReasonLen || !allOf(s, lowerDigitHyphen) {
		return fmt.Errorf("%w: reason %q must be a lower-case letter followed by up to %d lower-case letters, digits or hyphens", ErrMalformed, s, maxSkipReasonLen-1)
	}
	return nil
}

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
	// Skipped counts, by reason, the devices the plugin found but does
	// not offer (0.2.0); nil or empty when it skipped none.
	// UnmarshalJSON reads it in a result of any version: plugins built
	// before 0.2.0 existed write it in 0.1.0 results, and a caller loses
	// nothing by counting it.
	Skipped map[string]int
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
// dropped for versions before 0.1.0 and the skipped counts for versions
// before 0.2.0, which a caller of 0.1.0 may not know how to read.
func (r InfoResult) ForVersion(v string) InfoResult {
	r.CDIVersion = v
	if !AtLeast(v, Version020) {
		r.Skipped = nil
	}
	if !AtLeast(v, Version010) {
		r.Devices = nil
	} else if r.Devices == nil {
		r.Devices = []DeviceInfo{}
	}
	return r
}

// MarshalJSON writes the counts beside cdiVersion, the inventory, if
// any, under InventoryKey, and the skipped counts, if any, under
// SkippedKey, all in key order.
func (r InfoResult) MarshalJSON() ([]byte, error) {
	doc := make(map[string]any, len(r.Counts)+3)
	for k, n := range r.Counts {
		doc[k] = n
	}
	doc["cdiVersion"] = r.CDIVersion
	if r.Devices != nil {
		doc[InventoryKey] = r.Devices
	}
	if len(r.Skipped) > 0 {
		doc[SkippedKey] = r.Skipped
	}
	return jsonwrite.Marshal(doc)
}

// UnmarshalJSON reads what MarshalJSON writes. Members other than
// cdiVersion, the inventory and the skipped counts must be integer
// counts, except that a member whose name holds an underscore, which no
// resource-spec does, is not a count: one this package does not know is
// ignored, as SPEC.md says, so that a later version's member does not
// fail a caller's INFO.
func (r *InfoResult) UnmarshalJSON(data []byte) error {
	v, err := jsonread.Parse(data)
	if err != nil {
		return fmt.Errorf("INFO result: %w", err)
	}
	if !v.IsObject() {
		return fmt.Errorf("INFO result: %w: want an object, got %.40s", jsonread.ErrType, v.Raw)
	}
	var fixed struct {
		CDIVersion string         `json:"cdiVersion"`
		Devices    []DeviceInfo   `json:"device_inventory"`
		Skipped    map[string]int `json:"skipped_devices"`
	}
	if err := jsonread.Read(v, &fixed); err != nil {
		return fmt.Errorf("INFO result: %w", err)
	}
	counts := map[string]int{}
	v.ForEach(func(k, n gjson.Result) bool {
		if name := k.String(); name != "cdiVersion" && !strings.Contains(name, "_") {
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
	*r = InfoResult{CDIVersion: fixed.CDIVersion, Counts: counts, Devices: fixed.Devices, Skipped: fixed.Skipped}
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

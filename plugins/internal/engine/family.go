package engine

import (
	"fmt"
	"io"
	"io/fs"
	"slices"

	"github.com/cdiexec/cdi/spec"
)

// Family is what a plugin binary contributes: its name, the resource-types
// it serves and how it discovers devices.
type Family struct {
	// Name is the plugin's binary name, e.g. "drm".
	Name string
	// Types lists the resource-types the plugin serves; empty means any.
	Types []string
	// Args names the family's own args, those Discover reads with
	// ReadArgs. With the common args (CommonArgs) they are the only
	// members a configuration's args may hold: skel refuses any other
	// with code 15, so that a misspelt key is an error, not a default.
	Args []string
	// Discover lists the resource-specs the configuration serves and the
	// devices behind them. It reads the family's own args with ReadArgs,
	// whose spec errors (code 8) it returns as they are; other errors
	// become CodeInternal.
	Discover func(h *Host) (*Inventory, error)
}

// Host is what discovery may look at: the configuration and the device
// tree under the `root` arg.
type Host struct {
	Config *spec.Config
	// Root is the `root` arg (default "/"), prefixed to every /dev and /sys
	// lookup. Paths a family returns are host paths, never prefixed.
	Root string
	// FS is the tree at Root; discovery reads through it so tests can use a
	// fixture tree or fstest.MapFS.
	FS fs.FS
	// Stderr is for diagnostics; stdout belongs to the protocol.
	Stderr io.Writer
	// SkipProperties is set where nothing will show Device.Properties
	// (ADD): a family may then leave them out, and the reads only they
	// need with them.
	SkipProperties bool
	// DeferNUMA is set where the call needs the NUMA nodes of few devices
	// (ADD: of those it picks, and of every candidate only to prefer the
	// nodes it was asked for): a family may then set Device.LookUpNUMA
	// instead of NUMANode.
	DeferNUMA bool
	// Wanted, when not nil, lists the only resource-specs the call asks
	// for (an ADD that pins no device): a family may leave out the devices
	// of the others, and the reads only those need. Inventory.Resources
	// still lists every resource-spec served.
	Wanted []spec.ResourceSpec

	// skipped counts the devices Skip passed over, by reason.
	skipped map[string]int
}

// Skip passes over a device that discovery found but must not offer: it
// says on Stderr, in one line, which device (its id, or its nodes where
// it has no id) and why, and counts it under reason (one of spec's Skip
// reasons) for INFO's skipped_devices, so that an operator can tell why a
// device is not offered. Control characters in the line are escaped: a
// device's name must not forge lines in the caller's log.
func (h *Host) Skip(device, reason string, why error) {
	fmt.Fprintln(h.Stderr, escapeControl(fmt.Sprintf("skipped device %q (%s): %v", device, reason, why)))
	if h.skipped == nil {
		h.skipped = map[string]int{}
	}
	h.skipped[reason]++
}

// Wants reports whether the call asks for devices of rs (Wanted).
func (h *Host) Wants(rs spec.ResourceSpec) bool {
	return h.Wanted == nil || slices.Contains(h.Wanted, rs)
}

// Inventory is the result of discovery.
type Inventory struct {
	// Resources are the resource-specs the configuration serves, including
	// ones with no device right now (INFO reports them with count 0).
	// Requests for any other resource-spec are code 4.
	Resources []spec.ResourceSpec
	// Devices are in the order allocation prefers among equals.
	Devices []Device
}

// Device is one allocatable device.
type Device struct {
	// ID is stable across reboots and re-enumeration (a PCI address, a
	// path), valid per CheckDeviceID.
	ID       string
	Resource spec.ResourceSpec
	// Nodes are the device nodes a container gets, by host path.
	Nodes []spec.DeviceNode
	// NUMANode is nil when unknown.
	NUMANode *int
	// LookUpNUMA, if set, finds NUMANode the first time the engine needs
	// it: a family may set it instead of NUMANode where Host.DeferNUMA
	// says so, for a lookup that costs reads.
	LookUpNUMA func() *int
	Healthy    bool
	// Shared marks devices visible from more than one node.
	Shared bool
	// Capacity is the number of usage slots; 0 means the config's
	// `capacity` arg (default 1).
	Capacity    int
	Properties  map[string]string
	Env         map[string]string
	Mounts      []spec.Mount
	Annotations map[string]string
}

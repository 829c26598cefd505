package main

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/plugins/internal/sysfs"
	"github.com/cdiexec/cdi/spec"
)

func family() engine.Family {
	return engine.Family{Name: "generic", Args: []string{argGroups}, Discover: discover}
}

// discover matches every group's globs under root. Groups are served in
// configuration order, their devices in natural path order.
func discover(h *engine.Host) (*engine.Inventory, error) {
	groups, err := parseGroups(h.Config)
	if err != nil {
		return nil, err
	}
	inv := &engine.Inventory{}
	for _, g := range groups {
		inv.Resources = append(inv.Resources, g.resource)
	}
	classes := &classIndex{h: h}
	claimed := map[string]bool{}
	ids := map[string]bool{}
	for i := range groups[:lastWanted(h, groups)+1] {
		g := &groups[i]
		paths, err := g.match(h.FS, claimed)
		if err != nil {
			return nil, err
		}
		// A group the call does not want (Host.Wants) still claims its
		// paths and takes its ids, so that the wanted groups get what they
		// would get if all were discovered.
		for _, d := range g.devices(h, paths, classes) {
			if err := usableID(d.ID, ids); err != nil {
				h.Skip(nodePaths(d), spec.SkipBadID, err)
				continue
			}
			ids[d.ID] = true
			if h.Wants(d.Resource) {
				inv.Devices = append(inv.Devices, d)
			}
		}
	}
	return inv, nil
}

// usableID refuses an id that is not a valid device id (a node name too
// long, say) or that an earlier device took.
func usableID(id string, taken map[string]bool) error {
	if err := engine.CheckDeviceID(id); err != nil {
		return fmt.Errorf("no usable device id: %w", err)
	}
	if taken[id] {
		return fmt.Errorf("no usable device id: %q is another device's", id)
	}
	return nil
}

// lastWanted is the index of the last group whose devices the call
// wants, -1 for none. A group's paths and ids can be taken only by the
// groups before it, so the groups after that one change nothing the call
// gets and are not matched at all.
func lastWanted(h *engine.Host, groups []group) int {
	last := len(groups) - 1
	for last >= 0 && !h.Wants(groups[last].resource) {
		last--
	}
	return last
}

// match returns the host paths the group's globs match under root, in
// natural order. Directories (e.g. /dev/snd/by-path) are not devices, and
// a path an earlier group matched stays with that group so that no node
// is handed out twice.
func (g *group) match(fsys fs.FS, claimed map[string]bool) ([]string, error) {
	var out []string
	for _, p := range g.Paths {
		names, err := fs.Glob(fsys, strings.TrimPrefix(p, "/"))
		if err != nil {
			return nil, fmt.Errorf("matching %s: %w", p, err)
		}
		for _, name := range names {
			host := "/" + name
			if claimed[host] {
				continue
			}
			if fi, err := fs.Stat(fsys, name); err == nil && fi.IsDir() {
				continue
			}
			claimed[host] = true
			out = append(out, host)
		}
	}
	sort.Slice(out, func(i, j int) bool { return naturalLess(out[i], out[j]) })
	return out, nil
}

// devices turns matched paths into devices: one per path, or one for all.
func (g *group) devices(h *engine.Host, paths []string, classes *classIndex) []engine.Device {
	if len(paths) == 0 {
		return nil
	}
	if g.PerDevice == perAll {
		id := g.Name
		if id == "" {
			id = g.resource.Type
		}
		return []engine.Device{g.device(h, id, paths, classes)}
	}
	out := make([]engine.Device, 0, len(paths))
	for _, p := range paths {
		out = append(out, g.device(h, g.nodeID(p), []string{p}, classes))
	}
	return out
}

// device describes the device of paths. Its NUMA node, and its health,
// are looked up only where the call wants the group's devices, the NUMA
// node only when the engine needs it where the call defers it.
func (g *group) device(h *engine.Host, id string, paths []string, classes *classIndex) engine.Device {
	d := engine.Device{ID: id, Resource: g.resource, Healthy: true}
	if !h.SkipProperties { // an ADD shows none
		d.Properties = map[string]string{"path": strings.Join(paths, ",")}
		if g.Name != "" {
			d.Properties["group"] = g.Name
		}
	}
	for _, p := range paths {
		d.Nodes = append(d.Nodes, spec.DeviceNode{HostPath: p, ContainerPath: p, Permissions: g.Permissions})
	}
	if !h.Wants(g.resource) {
		return d
	}
	if h.DeferNUMA {
		d.LookUpNUMA = func() *int { return commonNUMA(h, paths, classes) }
	} else {
		d.NUMANode = commonNUMA(h, paths, classes)
	}
	for _, p := range paths {
		// The glob saw the entry, but a dangling link is a node that is gone.
		if name, err := sysfs.HostToName(p); err != nil || !sysfs.Exists(h.FS, name) {
			d.Healthy = false
		}
	}
	return d
}

// nodePaths names d's nodes for a note on stderr.
func nodePaths(d engine.Device) string {
	paths := make([]string, len(d.Nodes))
	for i, n := range d.Nodes {
		paths[i] = n.HostPath
	}
	return strings.Join(paths, ",")
}

// nodeID derives a stable device id from a node's path: the group name,
// then the path below /dev with '/' as '_' (serial-ttyUSB0,
// sound-snd_pcmC0D0p). Characters a device-id cannot hold become '_'.
func (g *group) nodeID(hostPath string) string {
	rel, ok := strings.CutPrefix(hostPath, "/dev/")
	if !ok {
		rel = strings.TrimPrefix(hostPath, "/")
	}
	id := strings.Map(func(r rune) rune {
		if r < 0x80 && (isAlnum(byte(r)) || strings.ContainsRune("-.:_", r)) {
			return r
		}
		return '_'
	}, rel)
	if g.Name != "" {
		id = g.Name + "-" + id
	}
	return id
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// commonNUMA is the NUMA node every path's device is on, as sysfs tells
// through the device's entry (sysEntry); nil when any is unknown or they
// differ.
func commonNUMA(h *engine.Host, paths []string, classes *classIndex) *int {
	var common *int
	for _, p := range paths {
		entry := sysEntry(h, p, classes)
		if entry == "" {
			return nil
		}
		n, err := sysfs.DeviceNUMA(h.FS, entry)
		if err != nil {
			fmt.Fprintf(h.Stderr, "generic: %s: NUMA node unknown: %v\n", p, err)
		}
		if n == nil || (common != nil && *common != *n) {
			return nil
		}
		common = n
	}
	return common
}

// sysEntry is the sysfs entry of the device behind the node at p: the one
// its device number names (/sys/dev/char/188:0), whatever the node is
// called, or else the class entry named like the node (/dev/ttyUSB0 is
// /sys/class/tty/ttyUSB0), which is all a tree of plain files offers.
func sysEntry(h *engine.Host, p string, classes *classIndex) string {
	if name, err := sysfs.HostToName(p); err == nil {
		if entry := sysfs.NumberEntry(h.FS, name); entry != "" {
			return entry
		}
	}
	return classes.entry(path.Base(p))
}

// classIndex lists the device classes under sys/class once, when a node
// is first looked up by name: on a host, nodes are found by number.
type classIndex struct {
	h      *engine.Host
	listed bool
	names  []string
}

// entry is the class entry named base, or "".
func (c *classIndex) entry(base string) string {
	if !c.listed {
		c.listed = true
		names, err := sysfs.Classes(c.h.FS)
		if err != nil {
			fmt.Fprintf(c.h.Stderr, "generic: NUMA nodes unknown: %v\n", err)
		}
		c.names = names
	}
	return sysfs.ClassEntry(c.h.FS, c.names, base)
}

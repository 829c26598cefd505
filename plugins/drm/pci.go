package main

import (
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/plugins/internal/sysfs"
	"github.com/cdiexec/cdi/spec"
)

// pciFunction finds the PCI function behind a DRM class entry: its
// address, and a name through which its attributes are read. The entry's
// device link points at the function's directory, which the kernel names
// by PCI address, so the address is the last element of the link's text:
// one readlink, where resolving the link to a directory costs three system
// calls. The link itself serves as the function's directory, since opening
// through a link follows it. Without symlink support in the FS, the
// function's uevent names it (PCI_SLOT_NAME).
func pciFunction(fsys fs.FS, entry string) (addr, dir string, err error) {
	link := path.Join(entry, "device")
	if links, ok := fsys.(fs.ReadLinkFS); ok {
		target, err := links.ReadLink(link)
		if err != nil {
			return "", "", err
		}
		if addr = path.Base(target); !isPCIAddress(addr) {
			// Not formatted: the caller skips the entry without a word.
			return "", "", errNotPCI
		}
		return addr, link, nil
	}
	ue, err := sysfs.Uevent(fsys, link)
	if err != nil {
		return "", "", err
	}
	if addr = ue["PCI_SLOT_NAME"]; !isPCIAddress(addr) {
		return "", "", errNotPCI
	}
	return addr, link, nil
}

// isPCIAddress accepts the kernel's PCI device names,
// "<domain>:<bus>:<slot>.<function>" in hex, e.g. "0000:03:00.0". Domains
// may have more than four digits (e.g. behind Intel VMD).
func isPCIAddress(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return false
	}
	slot, fn, ok := strings.Cut(parts[2], ".")
	return ok && len(parts[0]) >= 4 && len(parts[0]) <= 8 && isHex(parts[0]) &&
		len(parts[1]) == 2 && isHex(parts[1]) && len(slot) == 2 && isHex(slot) &&
		len(fn) == 1 && fn[0] >= '0' && fn[0] <= '7'
}

func isHex(s string) bool {
	return s != "" && strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}

// device builds the engine's view of a GPU, or reports false when the
// configuration does not serve it: a vendor outside the whitelist, or no
// node of a wanted kind.
func (a drmArgs) device(h *engine.Host, g *gpu, rs spec.ResourceSpec) (engine.Device, bool) {
	// The vendor is for the whitelist and the properties; without
	// either it is not read.
	var vendor string
	var err error
	if a.vendors != nil || !h.SkipProperties {
		vendor, err = sysfs.ReadString(h.FS, path.Join(g.dir, "vendor"))
	}
	if err != nil && a.vendors != nil {
		h.Skip(g.addr, spec.SkipUnreadable, fmt.Errorf("vendor unknown, so the whitelist cannot admit it: %w", err))
		return engine.Device{}, false
	}
	if err == nil && !a.whitelisted(vendor) {
		return engine.Device{}, false
	}
	var nodes []spec.DeviceNode
	for _, m := range []struct {
		want bool
		name string
	}{{a.primary, g.card}, {a.render, g.render}} {
		if m.want && m.name != "" {
			nodes = append(nodes, spec.DeviceNode{HostPath: "/dev/dri/" + m.name, ContainerPath: "/dev/dri/" + m.name, Permissions: "rw"})
		}
	}
	if len(nodes) == 0 {
		return engine.Device{}, false
	}
	d := engine.Device{ID: g.addr, Resource: rs, Nodes: nodes, Healthy: nodesExist(h.FS, nodes)}
	numa := func() *int {
		n, err := sysfs.NUMANode(h.FS, g.dir)
		if err != nil {
			fmt.Fprintf(h.Stderr, "drm: %s: NUMA node unknown: %v\n", g.addr, err)
		}
		return n
	}
	if h.DeferNUMA {
		d.LookUpNUMA = numa
	} else {
		d.NUMANode = numa()
	}
	if !h.SkipProperties {
		d.Properties = g.properties(h.FS, vendor)
	}
	return d, true
}

// nodesExist is the health check: a GPU whose node is gone (driver
// unbound, device removed) cannot be used by a container.
func nodesExist(fsys fs.FS, nodes []spec.DeviceNode) bool {
	for _, n := range nodes {
		name, err := sysfs.HostToName(n.HostPath)
		if err != nil || !sysfs.Exists(fsys, name) {
			return false
		}
	}
	return true
}

// properties describe the GPU for operators and the bridge. Attributes
// that cannot be read are left out rather than failing discovery.
func (g *gpu) properties(fsys fs.FS, vendor string) map[string]string {
	p := map[string]string{"pciAddress": g.addr}
	set := func(k, v string) {
		if v != "" {
			p[k] = v
		}
	}
	set("vendor", vendor)
	device, _ := sysfs.ReadString(fsys, path.Join(g.dir, "device"))
	set("device", device)
	set("card", g.card)
	set("renderNode", g.render)
	set("driver", driver(fsys, g.dir))
	return p
}

// driver names the kernel driver bound to the function, "" when none is:
// the driver link's target, or else the uevent's DRIVER.
func driver(fsys fs.FS, dir string) string {
	if name, err := sysfs.LinkBase(fsys, path.Join(dir, "driver")); err == nil {
		return name
	}
	ue, err := sysfs.Uevent(fsys, dir)
	if err != nil {
		return ""
	}
	return ue["DRIVER"]
}

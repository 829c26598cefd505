package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
)

// classDir is where the kernel lists every DRM minor, under root.
const classDir = "sys/class/drm"

// errNotPCI marks a DRM minor whose parent is not a PCI function (vgem,
// simpledrm on a platform device, ...): not a GPU this plugin serves.
var errNotPCI = errors.New("not a PCI device")

func family() engine.Family {
	return engine.Family{Name: "drm", Args: []string{argWantDeviceNodes, argVendorWhitelist}, Discover: discover}
}

// gpu is one PCI function with its DRM minors.
type gpu struct {
	addr string // PCI address, the device id
	dir  string // the function's sysfs directory, as a name in the FS
	// card and render are minor names ("card0", "renderD128"), "" if absent.
	card, render string
}

// discover lists the PCI GPUs under root, ordered by PCI address.
func discover(h *engine.Host) (*engine.Inventory, error) {
	args, err := parseArgs(h.Config)
	if err != nil {
		return nil, err
	}
	rs := spec.ResourceSpec{Type: h.Config.Type}
	inv := &engine.Inventory{Resources: []spec.ResourceSpec{rs}}
	gpus, err := scan(h)
	if err != nil {
		return nil, err
	}
	inv.Devices = make([]engine.Device, 0, len(gpus))
	for _, g := range gpus {
		if d, ok := args.device(h, g, rs); ok {
			inv.Devices = append(inv.Devices, d)
		}
	}
	return inv, nil
}

// scan groups the DRM minors in sys/class/drm by PCI function. Connector
// entries (card0-eDP-1), the version file and minors of non-PCI devices
// are skipped; a minor whose links cannot be read is logged and skipped so
// that one odd entry does not hide every GPU.
func scan(h *engine.Host) ([]*gpu, error) {
	entries, err := fs.ReadDir(h.FS, classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", classDir, err)
	}
	byAddr := map[string]*gpu{}
	for _, e := range entries {
		kind, n, ok := minorKind(e.Name())
		if !ok {
			continue
		}
		addr, dir, err := pciFunction(h.FS, path.Join(classDir, e.Name()))
		if errors.Is(err, errNotPCI) || errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			h.Skip(e.Name(), spec.SkipUnreadable, err)
			continue
		}
		g := byAddr[addr]
		if g == nil {
			g = &gpu{addr: addr, dir: dir}
			byAddr[addr] = g
		}
		g.add(kind, e.Name(), n)
	}
	out := make([]*gpu, 0, len(byAddr))
	for _, g := range byAddr {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out, nil
}

// add records a minor; should a function have two of a kind, the lowest
// numbered one wins, so the choice does not depend on directory order.
func (g *gpu) add(kind, name string, n int) {
	slot := &g.card
	if kind == kindRender {
		slot = &g.render
	}
	if *slot != "" {
		_, old, _ := minorKind(*slot)
		if old <= n {
			return
		}
	}
	*slot = name
}

// minorKind parses "card<N>" and "renderD<N>" with a canonical decimal N.
func minorKind(name string) (kind string, n int, ok bool) {
	for prefix, k := range map[string]string{"card": kindPrimary, "renderD": kindRender} {
		digits, found := strings.CutPrefix(name, prefix)
		if !found || digits == "" || (len(digits) > 1 && digits[0] == '0') || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		n, err := strconv.Atoi(digits)
		return k, n, err == nil
	}
	return "", 0, false
}

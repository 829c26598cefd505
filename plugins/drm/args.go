package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// The plugin's own args, named as the CDI draft names them.
const (
	argWantDeviceNodes = "want_device_nodes"
	argVendorWhitelist = "vendorid_whitelist"
)

// Node kinds of want_device_nodes, as the CDI draft names them.
const (
	kindPrimary = "primary" // /dev/dri/cardN: modesetting and rendering
	kindRender  = "render"  // /dev/dri/renderDN: rendering and compute only
)

// drmArgs are the plugin's own config args.
type drmArgs struct {
	primary, render bool
	// vendors holds the whitelisted vendor ids in lower case; nil means all.
	vendors map[string]bool
}

// parseArgs reads want_device_nodes and vendorid_whitelist; either, null
// or absent, keeps its default.
func parseArgs(cfg *spec.Config) (drmArgs, error) {
	var kinds, vendors []string
	err := engine.ReadArgs(cfg,
		engine.Strings(argWantDeviceNodes, &kinds, checkKinds),
		engine.Strings(argVendorWhitelist, &vendors, checkVendors),
	)
	if err != nil {
		return drmArgs{}, err
	}
	a := drmArgs{primary: kinds == nil || slices.Contains(kinds, kindPrimary), render: kinds == nil || slices.Contains(kinds, kindRender)}
	for _, id := range vendors {
		if a.vendors == nil {
			a.vendors = map[string]bool{}
		}
		a.vendors[strings.ToLower(id)] = true
	}
	return a, nil
}

// checkKinds accepts want_device_nodes: nil (both kinds), or a list of
// known kinds that is not empty.
func checkKinds(kinds []string) error {
	if kinds != nil && len(kinds) == 0 {
		return fmt.Errorf("is empty: a GPU without nodes cannot be used; list %q and/or %q", kindPrimary, kindRender)
	}
	for i, k := range kinds {
		if k != kindPrimary && k != kindRender {
			return jsonread.AtIndex(i, fmt.Errorf("unknown node kind %q (want %q or %q)", k, kindPrimary, kindRender))
		}
	}
	return nil
}

// checkVendors accepts vendorid_whitelist: PCI vendor ids, any number
// (none is all vendors).
func checkVendors(ids []string) error {
	for i, id := range ids {
		if !isVendorID(id) {
			return jsonread.AtIndex(i, fmt.Errorf("%q is not a PCI vendor id such as \"0x8086\"", id))
		}
	}
	return nil
}

// isVendorID accepts what sysfs writes to a PCI function's vendor file:
// "0x" and four hex digits. Being strict catches "8086", which would
// otherwise silently match nothing.
func isVendorID(s string) bool {
	hex, ok := strings.CutPrefix(strings.ToLower(s), "0x")
	return ok && len(hex) == 4 && strings.Trim(hex, "0123456789abcdef") == ""
}

// whitelisted reports whether a vendor id read from sysfs is served.
func (a drmArgs) whitelisted(vendor string) bool {
	return a.vendors == nil || a.vendors[strings.ToLower(vendor)]
}

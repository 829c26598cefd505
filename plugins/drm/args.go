package main

import (
	"strings"

	"github.com/cdiexec/cdi/spec"
	"github.com/tidwall/gjson"
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

func parseArgs(cfg *spec.Config) (drmArgs, error) {
	a := drmArgs{primary: true, render: true}
	if v := cfg.Arg("want_device_nodes"); v.Exists() && v.Type != gjson.Null {
		kinds, err := stringList(v, "want_device_nodes")
		if err != nil {
			return a, err
		}
		if len(kinds) == 0 {
			return a, spec.NewError(spec.CodeInvalidConfig, "args.want_device_nodes is empty: a GPU without nodes cannot be used; list %q and/or %q", kindPrimary, kindRender)
		}
		a.primary, a.render = false, false
		for _, k := range kinds {
			switch k {
			case kindPrimary:
				a.primary = true
			case kindRender:
				a.render = true
			default:
				return a, spec.NewError(spec.CodeInvalidConfig, "args.want_device_nodes: unknown node kind %q (want %q or %q)", k, kindPrimary, kindRender)
			}
		}
	}
	if v := cfg.Arg("vendorid_whitelist"); v.Exists() && v.Type != gjson.Null {
		ids, err := stringList(v, "vendorid_whitelist")
		if err != nil {
			return a, err
		}
		for _, id := range ids {
			if !isVendorID(id) {
				return a, spec.NewError(spec.CodeInvalidConfig, "args.vendorid_whitelist: %q is not a PCI vendor id such as \"0x8086\"", id)
			}
			if a.vendors == nil {
				a.vendors = map[string]bool{}
			}
			a.vendors[strings.ToLower(id)] = true
		}
	}
	return a, nil
}

// stringList reads a JSON array of strings.
func stringList(v gjson.Result, name string) ([]string, error) {
	if !v.IsArray() {
		return nil, spec.NewError(spec.CodeInvalidConfig, "args.%s must be a list of strings, not %s", name, v.Raw)
	}
	var out []string
	for _, e := range v.Array() {
		if e.Type != gjson.String {
			return nil, spec.NewError(spec.CodeInvalidConfig, "args.%s must be a list of strings; %s is not a string", name, e.Raw)
		}
		out = append(out, e.String())
	}
	return out, nil
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

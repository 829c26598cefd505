package main

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// argGroups is the plugin's one arg.
const argGroups = "groups"

// perDevice modes of a group.
const (
	perGlob = "glob" // every match is one device
	perAll  = "all"  // all matches together are one device
)

// group is one entry of args.groups, checked and with defaults filled in.
type group struct {
	Name        string   `json:"name"`
	Paths       []string `json:"paths"`
	PerDevice   string   `json:"perDevice"`
	Permissions string   `json:"permissions"`

	resource spec.ResourceSpec
}

// parseGroups reads args.groups, which must name at least one group.
// Unknown fields are errors, so that a typo such as "perDevices" is
// reported instead of silently ignored.
func parseGroups(cfg *spec.Config) ([]group, error) {
	var groups []group
	err := engine.ReadArgs(cfg, engine.Objects(argGroups, &groups, func(gs []group) error { return checkGroups(gs, cfg.Type) }))
	return groups, err
}

// checkGroups checks every group, fills in its defaults and resource-spec,
// and refuses a name used twice.
func checkGroups(groups []group, typ string) error {
	if len(groups) == 0 {
		return errors.New("none given: the configuration would serve nothing; list {name, paths, perDevice, permissions}")
	}
	seen := map[string]bool{}
	for i := range groups {
		g := &groups[i]
		if err := g.check(typ); err != nil {
			return jsonread.AtIndex(i, err)
		}
		if seen[g.Name] {
			return jsonread.AtIndex(i, jsonread.At("name", fmt.Errorf("%q is used twice", g.Name)))
		}
		seen[g.Name] = true
	}
	return nil
}

// check validates a group and fills in its defaults and resource-spec.
func (g *group) check(typ string) error {
	g.resource = spec.ResourceSpec{Type: typ, Subtype: g.Name}
	if _, err := spec.ParseResourceSpec(g.resource.String()); g.Name != "" && err != nil {
		return jsonread.At("name", fmt.Errorf("%q is not a resource-subtype (1-15 letters or digits)", g.Name))
	}
	if len(g.Paths) == 0 {
		return jsonread.At("paths", errors.New("is empty"))
	}
	for i, p := range g.Paths {
		if err := checkPattern(p); err != nil {
			return jsonread.At("paths", jsonread.AtIndex(i, err))
		}
	}
	switch g.PerDevice {
	case "":
		g.PerDevice = perGlob
	case perGlob, perAll:
	default:
		return jsonread.At("perDevice", fmt.Errorf("%q must be %q or %q", g.PerDevice, perGlob, perAll))
	}
	if g.Permissions == "" {
		g.Permissions = "rw"
	}
	if err := checkPermissions(g.Permissions); err != nil {
		return jsonread.At("permissions", err)
	}
	return nil
}

// checkPattern accepts an absolute, clean glob in path.Match syntax.
func checkPattern(p string) error {
	if !path.IsAbs(p) || p == "/" || path.Clean(p) != p {
		return fmt.Errorf("%q must be an absolute, clean host path such as /dev/ttyUSB*", p)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("%q: %w", p, err)
	}
	return nil
}

// checkPermissions accepts a cgroup device access string: each of r, w, m
// at most once.
func checkPermissions(p string) error {
	for i, c := range p {
		if !strings.ContainsRune("rwm", c) || strings.ContainsRune(p[:i], c) {
			return fmt.Errorf("%q must combine r, w and m, each at most once", p)
		}
	}
	return nil
}

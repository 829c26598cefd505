package main

import (
	"fmt"
	"path"
	"strings"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/plainjson"
	"github.com/tidwall/gjson"
)

// perDevice modes of a group.
const (
	perGlob = "glob" // every match is one device
	perAll  = "all"  // all matches together are one device
)

// group is one entry of args.groups, checked and with defaults filled in.
type group struct {
	Name        string
	Paths       []string
	PerDevice   string
	Permissions string

	resource spec.ResourceSpec
}

// AppendMembers describes g as args.groups holds it.
func (g *group) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("name", &g.Name),
		plainjson.Strings("paths", &g.Paths),
		plainjson.String("perDevice", &g.PerDevice),
		plainjson.String("permissions", &g.Permissions),
	)
}

// parseGroups reads args.groups. Unknown fields are errors, so that a typo
// such as "perDevices" is reported instead of silently ignored.
func parseGroups(cfg *spec.Config) ([]group, error) {
	v := cfg.Arg("groups")
	if !v.IsArray() {
		return nil, spec.NewError(spec.CodeInvalidConfig, "args.groups must be a list of {name, paths, perDevice, permissions}")
	}
	var groups []group
	err := plainjson.Read(gjson.ParseBytes(cfg.Args), plainjson.Table{plainjson.Objects("groups", &groups).Strict()})
	if err != nil {
		// The error names the member, element and field:
		// "args.groups[1].paths: ...".
		return nil, spec.NewError(spec.CodeInvalidConfig, "args.%w", err)
	}
	if len(groups) == 0 {
		return nil, spec.NewError(spec.CodeInvalidConfig, "args.groups is empty: the configuration would serve nothing")
	}
	seen := map[string]bool{}
	for i := range groups {
		g := &groups[i]
		if err := g.check(cfg.Type); err != nil {
			return nil, spec.NewError(spec.CodeInvalidConfig, "args.groups[%d]: %w", i, err)
		}
		if seen[g.Name] {
			return nil, spec.NewError(spec.CodeInvalidConfig, "args.groups[%d]: name %q is used twice", i, g.Name)
		}
		seen[g.Name] = true
	}
	return groups, nil
}

// check validates a group and fills in its defaults and resource-spec.
func (g *group) check(typ string) error {
	g.resource = spec.ResourceSpec{Type: typ, Subtype: g.Name}
	if _, err := spec.ParseResourceSpec(g.resource.String()); g.Name != "" && err != nil {
		return fmt.Errorf("name %q is not a resource-subtype (1-15 letters or digits)", g.Name)
	}
	if len(g.Paths) == 0 {
		return fmt.Errorf("paths is empty")
	}
	for _, p := range g.Paths {
		if err := checkPattern(p); err != nil {
			return err
		}
	}
	switch g.PerDevice {
	case "":
		g.PerDevice = perGlob
	case perGlob, perAll:
	default:
		return fmt.Errorf("perDevice %q must be %q or %q", g.PerDevice, perGlob, perAll)
	}
	if g.Permissions == "" {
		g.Permissions = "rw"
	}
	return checkPermissions(g.Permissions)
}

// checkPattern accepts an absolute, clean glob in path.Match syntax.
func checkPattern(p string) error {
	if !path.IsAbs(p) || p == "/" || path.Clean(p) != p {
		return fmt.Errorf("path %q must be an absolute, clean host path such as /dev/ttyUSB*", p)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("path %q: %w", p, err)
	}
	return nil
}

// checkPermissions accepts a cgroup device access string: each of r, w, m
// at most once.
func checkPermissions(p string) error {
	for i, c := range p {
		if !strings.ContainsRune("rwm", c) || strings.ContainsRune(p[:i], c) {
			return fmt.Errorf("permissions %q must combine r, w and m, each at most once", p)
		}
	}
	return nil
}

package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/cdiexec/cdi/spec/invoke"
)

// selectConfs loads the drop-ins of the command's type and picks those to
// run. Every error it returns is a usage error. A drop-in that does not load
// is an error unless --conf names another one, which then runs with a
// warning: add or del must never fall back on a drop-in the operator did not
// mean because the intended one is broken.
func selectConfs(o *options, c *command, stderr io.Writer) ([]*invoke.Conf, error) {
	dir := filepath.Join(o.confDir, c.typ+".d")
	confs, loadErr := invoke.LoadConfs(o.confDir, c.typ)
	if loadErr != nil && o.conf == "" {
		return nil, fmt.Errorf("loading drop-ins: %w", loadErr)
	}
	if len(confs) == 0 && loadErr == nil {
		return nil, fmt.Errorf("no drop-ins for type %q in %s", c.typ, dir)
	}
	if o.conf != "" {
		return pickConf(o.conf, dir, confs, loadErr, stderr)
	}
	if c.single() && len(confs) > 1 {
		return nil, fmt.Errorf("%s: %d drop-ins for type %q in %s (%s); choose one with --conf",
			c.name, len(confs), c.typ, dir, strings.Join(confIDs(confs), ", "))
	}
	return confs, nil
}

func pickConf(name, dir string, confs []*invoke.Conf, loadErr error, stderr io.Writer) ([]*invoke.Conf, error) {
	var match []*invoke.Conf
	for _, c := range confs {
		if c.ID() == name || filepath.Base(c.Path) == name || c.Name == name {
			match = append(match, c)
		}
	}
	switch {
	case len(match) == 0 && loadErr != nil:
		return nil, fmt.Errorf("no loadable drop-in %q in %s: %w", name, dir, loadErr)
	case len(match) == 0:
		return nil, fmt.Errorf("no drop-in %q in %s (there are: %s)", name, dir, strings.Join(confIDs(confs), ", "))
	case len(match) > 1:
		return nil, fmt.Errorf("--conf %q matches %d drop-ins in %s; use the file name", name, len(match), dir)
	}
	if loadErr != nil {
		fmt.Fprintf(stderr, "cditool: warning: other drop-ins of the type do not load: %v\n", loadErr)
	}
	return match, nil
}

func confIDs(confs []*invoke.Conf) []string {
	ids := make([]string, len(confs))
	for i, c := range confs {
		ids[i] = filepath.Base(c.Path)
	}
	return ids
}

package cdispec

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdiexec/cdi/spec"
)

// WriteFile writes s as the spec file name of the directory, through the
// CDI library, which checks the spec and replaces the file atomically.
// name must be a plain file name that Sync never sweeps: one not starting
// with FilePrefix.
func (d *Dir) WriteFile(name string, s *specs.Spec) error {
	if err := checkOwnName(name); err != nil {
		return err
	}
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return fmt.Errorf("CDI spec %s: %w", name, err)
	}
	s.Version = v
	return d.writeSpec(s, name)
}

// RemoveFile removes the spec file name; one already gone is no error.
func (d *Dir) RemoveFile(name string) error {
	if err := checkOwnName(name); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(d.path, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing CDI spec: %w", err)
	}
	return nil
}

// ErrFileName is wrapped by the errors of WriteFile and RemoveFile for a
// name they refuse.
var ErrFileName = errors.New("not a spec file name of its own")

func checkOwnName(name string) error {
	if name == "" || filepath.Base(name) != name || strings.HasPrefix(name, FilePrefix) || !strings.HasSuffix(name, ".json") {
		return fmt.Errorf("%w: %q", ErrFileName, name)
	}
	return nil
}

// Edits is what the ADD result r gives a container, as CDI container
// edits: its device nodes (or, from a 0.0.x result, its device paths),
// its env sorted by name, and its mounts as bind mounts.
func Edits(r *spec.AddResult) specs.ContainerEdits {
	var e specs.ContainerEdits
	nodes := r.DeviceNodes
	if len(nodes) == 0 {
		for _, p := range r.Devices {
			nodes = append(nodes, spec.DeviceNode{HostPath: p})
		}
	}
	if len(nodes) > 0 {
		e.DeviceNodes = deviceNodes(nodes)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		e.Env = append(e.Env, k+"="+r.Env[k])
	}
	for _, m := range r.Mounts {
		opts := []string{"rbind"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		e.Mounts = append(e.Mounts, &specs.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: "bind", Options: opts})
	}
	return e
}

// Empty says whether e edits nothing: CDI refuses such a device.
func Empty(e specs.ContainerEdits) bool {
	return len(e.DeviceNodes) == 0 && len(e.Env) == 0 && len(e.Mounts) == 0 && len(e.Hooks) == 0
}

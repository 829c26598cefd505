package invoke

import (
	"fmt"
	"path/filepath"

	cniinvoke "github.com/containernetworking/cni/pkg/invoke"
)

// FindInPath returns the path of the plugin binary name in the first of dirs
// that holds a regular file of that name; failures wrap ErrNotFound.
//
// It is CNI's invoke.FindInPath, whose rules are the protocol's: a name
// with a path separator is refused, and the executable bit is left for
// exec to check, so that the error says "permission denied" rather than
// "not found".
func FindInPath(name string, dirs []string) (string, error) {
	path, err := cniinvoke.FindInPath(name, dirs)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return path, nil
}

// SplitPath splits a colon-separated search path such as "/opt/cdi/bin:/usr/lib/cdi".
// Empty elements are dropped: in a shell PATH they mean the current
// directory, which is no place to pick up binaries that handle devices.
func SplitPath(s string) []string {
	var dirs []string
	for _, d := range filepath.SplitList(s) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

package invoke

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FindInPath returns the path of the plugin binary name in the first of dirs
// that holds a regular file of that name; failures wrap ErrNotFound.
//
// It has the semantics of CNI's invoke.FindInPath (name-agnostic, a name
// with a path separator is refused, the executable bit is left for exec to
// check so that the error says "permission denied" rather than "not
// found"). It is not imported from CNI because that package also links
// OpenTelemetry and CNI's result types into every caller.
func FindInPath(name string, dirs []string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("%w: no plugin name given", ErrNotFound)
	case strings.ContainsRune(name, os.PathSeparator):
		return "", fmt.Errorf("%w: plugin name %q is a path, not a file name", ErrNotFound, name)
	case len(dirs) == 0:
		return "", fmt.Errorf("%w: plugin %q: the search path is empty", ErrNotFound, name)
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: plugin %q is in none of %s", ErrNotFound, name, strings.Join(dirs, ":"))
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

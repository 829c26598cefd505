// Package nodedefaults reads conf.d/node-defaults.list, the one list of the
// drop-ins that install on a node: the image carries only these, and
// `make install` installs only these. The other drop-ins in conf.d are
// examples and test fixtures.
package nodedefaults

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// File is the list's name in conf.d.
const File = "node-defaults.list"

// ErrBadName is wrapped by Read's error for a line that is not a drop-in
// name of conf.d, or one named twice.
var ErrBadName = errors.New("not a <type>.d/<name>.conf of conf.d, once")

// dropInName is a drop-in's path under a drop-in directory, as the bridge
// and cditool read them; nothing that could leave conf.d.
var dropInName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*\.d/[A-Za-z0-9][A-Za-z0-9._-]*\.conf$`)

// Read returns the drop-ins the list in confD names, as slash paths
// relative to confD ("gpu.d/drm.conf"), sorted. Blank lines and lines
// starting with "#" are skipped.
func Read(confD string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(confD, File))
	if err != nil {
		return nil, err
	}
	return parse(data)
}

func parse(data []byte) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !dropInName.MatchString(line) || slices.Contains(names, line) {
			return nil, fmt.Errorf("%s, line %d: %q: %w", File, n, line, ErrBadName)
		}
		names = append(names, line)
	}
	slices.Sort(names)
	return names, sc.Err()
}

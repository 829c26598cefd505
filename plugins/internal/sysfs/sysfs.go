// Package sysfs reads the Linux device tree (/sys and /dev) through an
// fs.FS rooted at the host's root, so that plugins honour the `root` arg and
// tests can run against a fixture tree or an fstest.MapFS.
//
// Names passed to these functions are fs.FS names ("sys/class/drm"), never
// host paths ("/sys/class/drm"); HostToName converts.
package sysfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// maxLinkHops bounds symlink resolution the way the kernel does (ELOOP
// after 40 links), so a looping fixture cannot hang discovery.
const maxLinkHops = 40

// maxAttrSize bounds what ReadString reads: sysfs attributes are at most a
// page, and a fixture file should be no bigger.
const maxAttrSize = 4096

// ErrLoop is returned by Resolve for a chain of more than 40 symlinks.
var ErrLoop = errors.New("too many levels of symbolic links")

// HostToName turns an absolute host path ("/dev/dri/card0") into the name
// of the same file in an fs.FS rooted at the host's root ("dev/dri/card0").
func HostToName(hostPath string) (string, error) {
	name := strings.TrimPrefix(path.Clean(hostPath), "/")
	if !path.IsAbs(hostPath) || name == "" || !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "hostpath", Path: hostPath, Err: fs.ErrInvalid}
	}
	return name, nil
}

// Exists reports whether name exists, following symlinks. Device nodes in
// fixtures are plain files, so any kind of file counts.
func Exists(fsys fs.FS, name string) bool {
	_, err := fs.Stat(fsys, name)
	return err == nil
}

// ReadString reads a small attribute file and trims surrounding space.
func ReadString(fsys fs.FS, name string) (string, error) {
	data, err := readAttr(fsys, name, maxAttrSize+1)
	if err != nil {
		return "", err
	}
	if len(data) > maxAttrSize {
		return "", fmt.Errorf("reading %s: more than %d bytes, not a sysfs attribute", name, maxAttrSize)
	}
	return string(bytes.TrimSpace(data)), nil
}

// Uevent parses the KEY=VALUE lines of dir/uevent, which the kernel writes
// for every device (e.g. PCI_SLOT_NAME, DRIVER, DEVNAME).
func Uevent(fsys fs.FS, dir string) (map[string]string, error) {
	text, err := ReadString(fsys, path.Join(dir, "uevent"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out, sc.Err()
}

// NUMANode reads dir/numa_node. A missing file or -1 (what the kernel
// reports when firmware gives no locality) is nil: unknown.
func NUMANode(fsys fs.FS, dir string) (*int, error) {
	n, err := readNUMANode(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return n, err
}

// readNUMANode is NUMANode with a missing file an error wrapping
// fs.ErrNotExist, so that DeviceNUMA reads each ancestor's attribute
// without asking first whether it is there.
func readNUMANode(fsys fs.FS, dir string) (*int, error) {
	text, err := ReadString(fsys, path.Join(dir, "numa_node"))
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < -1 {
		return nil, fmt.Errorf("%s/numa_node: %q is not a NUMA node number", dir, text)
	}
	if n == -1 {
		return nil, nil
	}
	return &n, nil
}

// readAttr reads at most limit bytes of name.
func readAttr(fsys fs.FS, name string, limit int) ([]byte, error) {
	if r, ok := fsys.(attrReader); ok {
		return r.readAttr(name, limit)
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return data, nil
}

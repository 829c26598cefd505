package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// Resolve returns name with every symlink in it resolved, as a name in
// fsys: what realpath(3) does, but inside fsys. sysfs is built from
// relative links (/sys/class/drm/card0 -> ../../devices/...), and a link
// inside a linked directory is relative to where the directory really is,
// so the links have to be followed one component at a time.
//
// Paths are resolved as if fsys were the root directory: ".." at the top
// stays there and an absolute link target starts again from the top, so
// nothing outside the tree is consulted. When fsys cannot read links
// (fs.ReadLinkFS), the error wraps errors.ErrUnsupported.
func Resolve(fsys fs.FS, name string) (string, error) {
	return walkLinks(fsys, name, false)
}

// ErrLeavesTree is Inside's answer for a name whose links lead out of
// the tree.
var ErrLeavesTree = errors.New("a link leads out of the tree")

// Inside checks that resolving name's links never leaves fsys: no link
// on the way has an absolute target, and no ".." climbs above the top.
// os.DirFS, and so HostFS, would follow such a link out of the tree to
// the host's own files (a fixture's dev linking to the host's /dev). It
// returns nil, or an error wrapping ErrLeavesTree, or the lookup's error.
func Inside(fsys fs.FS, name string) error {
	_, err := walkLinks(fsys, name, true)
	return err
}

// walkLinks is Resolve, one component at a time; strict makes a way out
// of the tree ErrLeavesTree.
func walkLinks(fsys fs.FS, name string, strict bool) (string, error) {
	rl, ok := fsys.(fs.ReadLinkFS)
	if !ok {
		return "", fmt.Errorf("resolving %s: file system cannot read symlinks: %w", name, errors.ErrUnsupported)
	}
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: "resolve", Path: name, Err: fs.ErrInvalid}
	}
	var done []string
	todo := splitPath(name)
	for hops := 0; len(todo) > 0; {
		elem := todo[0]
		todo = todo[1:]
		if elem == ".." {
			if strict && len(done) == 0 {
				return "", &fs.PathError{Op: "resolve", Path: name, Err: ErrLeavesTree}
			}
			done = done[:max(len(done)-1, 0)]
			continue
		}
		cur := path.Join(append(done, elem)...)
		fi, err := rl.Lstat(cur)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, elem)
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", &fs.PathError{Op: "resolve", Path: name, Err: ErrLoop}
		}
		target, err := rl.ReadLink(cur)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			if strict {
				return "", &fs.PathError{Op: "resolve", Path: cur + " -> " + target, Err: ErrLeavesTree}
			}
			done = nil
		}
		todo = append(splitPath(target), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return path.Join(done...), nil
}

// splitPath splits a slash-separated path into its elements, dropping
// empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, e := range strings.Split(p, "/") {
		if e != "" && e != "." {
			out = append(out, e)
		}
	}
	return out
}

// LinkBase returns the last element of the target of the symlink name, e.g.
// "i915" for a PCI function's driver link (-> ../../../bus/pci/drivers/i915).
func LinkBase(fsys fs.FS, name string) (string, error) {
	target, err := fs.ReadLink(fsys, name)
	if err != nil {
		return "", err
	}
	base := path.Base(target)
	if base == "/" || base == "." || base == ".." {
		return "", fmt.Errorf("symlink %s -> %q names no file", name, target)
	}
	return base, nil
}

// DeviceNUMA returns the NUMA node of the device behind a class entry such
// as "sys/class/tty/ttyUSB0": that of the directory the entry's device
// link leads to, or of its first ancestor that has a numa_node attribute
// (for a USB serial port, the PCI function of its host controller). It is
// nil when the tree says nothing or fsys cannot read links.
func DeviceNUMA(fsys fs.FS, classEntry string) (*int, error) {
	dir, err := deviceDir(fsys, classEntry)
	if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for ; dir != "." && dir != "sys" && dir != "sys/devices"; dir = path.Dir(dir) {
		n, err := readNUMANode(fsys, dir)
		if !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
	}
	return nil, nil
}

// deviceDir is where classEntry's device link leads. On sysfs the entry
// is a link to its device's directory under sys/devices, and the device
// link sits there; no directory on the way is a link. So each link's
// text joined to the directory it sits in is exact, at a readlink per
// link where Resolve looks up every component of the path. An entry the
// text cannot answer for, one that is no link (the deprecated layout) or
// whose link leads to another link, is resolved.
func deviceDir(fsys fs.FS, classEntry string) (string, error) {
	resolve := func() (string, error) { return Resolve(fsys, path.Join(classEntry, "device")) }
	target, err := fs.ReadLink(fsys, classEntry)
	if err != nil {
		return resolve()
	}
	dir := joinLink(path.Dir(classEntry), target)
	if fi, err := fs.Lstat(fsys, dir); err != nil || fi.Mode()&fs.ModeSymlink != 0 {
		return resolve()
	}
	target, err = fs.ReadLink(fsys, path.Join(dir, "device"))
	if err != nil {
		return resolve()
	}
	return joinLink(dir, target), nil
}

// joinLink is where a link in dir with target leads, taken as text, with
// Resolve's rules at the top: ".." stays there and an absolute target
// starts again from it.
func joinLink(dir, target string) string {
	if strings.HasPrefix(target, "/") {
		dir = "."
	}
	done := splitPath(dir)
	for _, elem := range splitPath(target) {
		if elem == ".." {
			done = done[:max(len(done)-1, 0)]
			continue
		}
		done = append(done, elem)
	}
	if len(done) == 0 {
		return "."
	}
	return path.Join(done...)
}

// NumberEntry is the entry under sys/dev of the device node name, by its
// device number: "sys/dev/char/188:0" for the character device 188:0,
// "sys/dev/block/8:0" for a block device. Like a class entry it is a link
// to the device's directory, and it names the device whatever the node is
// called or however it is reached (/dev/serial/by-id/...). It is "" for
// anything but a device node, such as a fixture's plain file, and where
// the tree has no such entry.
func NumberEntry(fsys fs.FS, name string) string {
	fi, err := fs.Stat(fsys, name)
	if err != nil || fi.Mode()&fs.ModeDevice == 0 {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	kind := "block"
	if fi.Mode()&fs.ModeCharDevice != 0 {
		kind = "char"
	}
	major, minor := splitDevice(uint64(st.Rdev))
	entry := "sys/dev/" + kind + "/" + strconv.FormatUint(major, 10) + ":" + strconv.FormatUint(minor, 10)
	if _, err := fs.Lstat(fsys, entry); err != nil {
		return ""
	}
	return entry
}

// splitDevice splits a Linux device number into its major and minor
// numbers, as glibc's major(3) and minor(3) do: the major is bits 8-19
// and 44-63, the minor bits 0-7 and 20-43.
func splitDevice(dev uint64) (major, minor uint64) {
	major = (dev&0x00000000000fff00)>>8 | (dev&0xfffff00000000000)>>32
	minor = dev&0x00000000000000ff | (dev&0x00000ffffff00000)>>12
	return major, minor
}

// Classes lists the device classes under sys/class (tty, drm, sound, ...);
// none when the tree has no sys/class.
func Classes(fsys fs.FS) ([]string, error) {
	entries, err := fs.ReadDir(fsys, "sys/class")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

// ClassEntry finds the class entry for the device node called base (the
// kernel names both alike: /dev/ttyUSB0 and /sys/class/tty/ttyUSB0), trying
// classes in order. It returns "" when no class has one.
func ClassEntry(fsys fs.FS, classes []string, base string) string {
	if base == "" || base == "." || base == ".." || strings.Contains(base, "/") {
		return ""
	}
	for _, c := range classes {
		name := path.Join("sys/class", c, base)
		if _, err := fs.Lstat(fsys, name); err == nil {
			return name
		}
	}
	return ""
}

package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"github.com/cdiexec/cdi/plugins/internal/sysfs"
	"github.com/cdiexec/cdi/spec"
)

// keepDevices drops, through Host.Skip, every device whose nodes check
// refuses: checkNodes, or checkNodePaths where the files are checked
// later, device by device (call.usable).
func keepDevices(h *Host, devs []Device, check func(*Host, []spec.DeviceNode) error) []Device {
	kept := devs[:0]
	for _, d := range devs {
		if err := check(h, d.Nodes); err != nil {
			h.Skip(d.ID, reasonOf(err), err)
			continue
		}
		kept = append(kept, d)
	}
	return kept
}

// refusal is a node check's error: why a device's nodes are refused, and
// the reason of skipped_devices it counts under.
type refusal struct {
	reason string
	err    error
}

func refuse(reason string, format string, args ...any) error {
	return &refusal{reason: reason, err: fmt.Errorf(format, args...)}
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// reasonOf is the reason err was refused for; an error the checks did not
// judge is a node that could not be read.
func reasonOf(err error) string {
	if r, ok := errors.AsType[*refusal](err); ok {
		return r.reason
	}
	return spec.SkipUnreadable
}

// checkNodes refuses nodes that a container must not be given: a path
// that is not clean and absolute or holds a control character (a newline
// in a file name would forge lines wherever the path is printed), an
// existing file that is not a device node (a link from /dev/x to
// /etc/shadow), or, under a root other than "/", a node that resolves out
// of it. A node that does not exist is left to the family, which reports
// the device unhealthy.
func checkNodes(h *Host, nodes []spec.DeviceNode) error {
	if err := checkNodePaths(h, nodes); err != nil {
		return err
	}
	return checkNodeFiles(h, nodes)
}

// checkNodePaths is the part of checkNodes that reads no file.
func checkNodePaths(_ *Host, nodes []spec.DeviceNode) error {
	for _, n := range nodes {
		if p := n.HostPath; !path.IsAbs(p) || path.Clean(p) != p || hasControl(p) {
			return refuse(spec.SkipBadPath, "node path %q is not a clean absolute path of printable characters", p)
		}
	}
	return nil
}

// checkNodeFiles is the part of checkNodes that looks at the files.
func checkNodeFiles(h *Host, nodes []spec.DeviceNode) error {
	for _, n := range nodes {
		p := n.HostPath
		name, err := sysfs.HostToName(p)
		if err != nil {
			return &refusal{reason: spec.SkipBadPath, err: err}
		}
		fi, err := fs.Stat(h.FS, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", p, err)
		}
		if !isDeviceNode(fi, h.Root) {
			return refuse(spec.SkipNotDeviceNode, "node %s is not a device node but %s", p, kind(fi))
		}
		if filepath.Clean(h.Root) != "/" {
			if err := sysfs.Inside(h.FS, name); err != nil {
				return refuse(spec.SkipOutsideRoot, "node %s leads out of root %s: %w", p, h.Root, err)
			}
		}
	}
	return nil
}

// isDeviceNode says whether fi, reached through any links, is a
// character or block device. Under a root other than "/" (a fixture tree,
// or a copy of a host's /dev) an empty regular file stands for one, since
// a fixture cannot hold real device nodes.
func isDeviceNode(fi fs.FileInfo, root string) bool {
	if fi.Mode()&fs.ModeDevice != 0 {
		return true
	}
	return filepath.Clean(root) != "/" && fi.Mode().IsRegular() && fi.Size() == 0
}

func kind(fi fs.FileInfo) string {
	switch {
	case fi.Mode().IsRegular():
		return fmt.Sprintf("a regular file of %d bytes", fi.Size())
	case fi.IsDir():
		return "a directory"
	case fi.Mode()&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case fi.Mode()&fs.ModeSocket != 0:
		return "a socket"
	}
	return fmt.Sprintf("a file of mode %v", fi.Mode())
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, isControl) >= 0
}

// isControl is an ASCII control character, the bytes that move a
// terminal's cursor or end a line.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// escapeControl writes each ASCII control character of s as \xNN.
func escapeControl(s string) string {
	if !hasControl(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

package cdispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/atomicfile"
)

// FilePrefix starts the name of every spec file a Dir writes; files
// without it are other producers' and never touched.
const FilePrefix = "cdi-bridge_"

// ClaimClass is the CDI class of the DRA front end's per-claim spec
// files: a claim's devices are <vendor>/claim=<request-id>. No pool of
// the bridge has this name (pool names hold a '-'), so it never meets the
// device plugins' per-pool kinds.
const ClaimClass = "claim"

// ClaimDevice is the qualified CDI name of the device of a claim whose
// ADD had request-id requestID.
func ClaimDevice(vendor, requestID string) string { return vendor + "/" + ClaimClass + "=" + requestID }

// Device is one device of a Kind: its name within the kind and the device
// nodes a container that gets it sees.
type Device struct {
	Name  string
	Nodes []spec.DeviceNode
}

// Kind is devices named <vendor>/<class>=<device name>.
type Kind struct {
	Vendor, Class string
	Devices       []Device
}

// PoolKind is devices as the kind <vendor>/<class>, each named by its
// inventory id, as the device plugins name a pool's devices.
func PoolKind(vendor, class string, devices []spec.DeviceInfo) Kind {
	k := Kind{Vendor: vendor, Class: class, Devices: make([]Device, 0, len(devices))}
	for _, d := range devices {
		k.Devices = append(k.Devices, Device{Name: d.ID, Nodes: d.DeviceNodes})
	}
	return k
}

// QualifiedName is the CDI name of k's device name.
func (k Kind) QualifiedName(name string) string {
	return parser.QualifiedName(k.Vendor, k.Class, name)
}

// Check says whether k's vendor and class are valid under CDI's rules.
func (k Kind) Check() error {
	if err := parser.ValidateVendorName(k.Vendor); err != nil {
		return fmt.Errorf("CDI kind %s/%s: %w", k.Vendor, k.Class, err)
	}
	if err := CheckClassName(k.Class); err != nil {
		return fmt.Errorf("CDI kind %s/%s: %w", k.Vendor, k.Class, err)
	}
	return nil
}

// CheckClassName says whether name is a valid CDI class name.
func CheckClassName(name string) error {
	return parser.ValidateClassName(name)
}

// CheckDeviceName says whether name is a valid CDI device name.
func CheckDeviceName(name string) error {
	if err := parser.ValidateDeviceName(name); err != nil {
		return fmt.Errorf("CDI device name %q: %w", name, err)
	}
	return nil
}

// Spec returns k as a CDI spec, its devices sorted by name. A device with
// no device node is left out: a CDI device must edit the container, and
// such a device has nothing to edit. The version is the lowest that holds
// what the spec uses, so that older runtimes read it too.
func (k Kind) Spec() (*specs.Spec, error) {
	if err := k.Check(); err != nil {
		return nil, err
	}
	s := &specs.Spec{Kind: k.Vendor + "/" + k.Class, Devices: []specs.Device{}}
	for _, d := range k.Devices {
		if len(d.Nodes) == 0 {
			continue
		}
		if err := CheckDeviceName(d.Name); err != nil {
			return nil, err
		}
		s.Devices = append(s.Devices, specs.Device{Name: d.Name, ContainerEdits: specs.ContainerEdits{DeviceNodes: deviceNodes(d.Nodes)}})
	}
	sort.Slice(s.Devices, func(i, j int) bool { return s.Devices[i].Name < s.Devices[j].Name })
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return nil, fmt.Errorf("CDI kind %s: %w", s.Kind, err)
	}
	s.Version = v
	return s, nil
}

func deviceNodes(nodes []spec.DeviceNode) []*specs.DeviceNode {
	out := make([]*specs.DeviceNode, 0, len(nodes))
	for _, n := range nodes {
		// The plugin's permissions, or the protocol's default: CDI's own
		// default would add "m" (mknod) to the device cgroup.
		n = n.WithDefaults()
		out = append(out, &specs.DeviceNode{Path: n.ContainerPath, HostPath: n.HostPath, Permissions: n.Permissions})
	}
	return out
}

// Dir is a spec directory in which this package keeps the files of one
// vendor's kinds. Its writes may run concurrently (the node's Sync and the
// DRA front end's claims), each staged in a directory of its own; Sync
// must not run concurrently with itself.
type Dir struct {
	path, vendor string

	keepMu sync.Mutex
	kept   map[string]bool // the files of the last Keep
}

// Open returns the spec directory path for vendor's kinds, creating the
// directory if need be. It removes what a write of a process killed
// mid-way left there (RemoveDebris), never a write under way, another
// process's included; nothing else in it is changed until Sync.
func Open(path, vendor string) (*Dir, error) {
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("CDI vendor %q: %w", vendor, err)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("CDI spec directory: %w", err)
	}
	d := &Dir{path: path, vendor: vendor}
	if err := d.RemoveDebris(); err != nil {
		return nil, err
	}
	return d, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// FileName is the name of kind k's spec file in a Dir.
func FileName(k Kind) string {
	return FilePrefix + cdi.GenerateSpecName(k.Vendor, k.Class) + ".json"
}

// Sync makes the directory hold one spec file per kind, with its devices
// that have device nodes, and removes the other files of the vendor's
// kinds that this package wrote (kinds gone since, or left by an earlier
// run), and what killed writes left (RemoveDebris: what Open found too
// young goes at a later Sync). A file whose content is already right is
// not written again, so that a runtime watching the directory is not
// woken for nothing. Every
// kind is tried; the error joins those that failed. Named returns, per
// kind (Kind.Class), the devices that a file on disk now names.
func (d *Dir) Sync(kinds []Kind) (named map[string]map[string]bool, err error) {
	named, files, err := d.writeAll(kinds)
	return named, errors.Join(err, d.sweep(files))
}

// Keep makes the directory hold the files of kinds, written as Sync
// writes them, beside Sync's, until a Keep without them: files the
// runtime still needs for containers of another part of the process (a
// pool the device plugins served, moved to DRA while containers hold
// its slots). Sync removes none of them; one no longer kept goes at the
// next Sync that does not name it. It may run beside Sync.
func (d *Dir) Keep(kinds []Kind) error {
	_, files, err := d.writeAll(kinds)
	d.keepMu.Lock()
	d.kept = files
	d.keepMu.Unlock()
	return err
}

// writeAll writes each kind's file (write) and returns, per kind
// (Kind.Class), the devices a file on disk now names, and the names of
// the files written or already right. Every kind is tried; the error
// joins those that failed.
func (d *Dir) writeAll(kinds []Kind) (named map[string]map[string]bool, files map[string]bool, err error) {
	named, files = map[string]map[string]bool{}, map[string]bool{}
	var errs []error
	for _, k := range kinds {
		if k.Vendor != d.vendor {
			errs = append(errs, fmt.Errorf("CDI kind %s/%s: not of vendor %s", k.Vendor, k.Class, d.vendor))
			continue
		}
		names, err := d.write(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		named[k.Class] = names
		if len(names) > 0 {
			files[FileName(k)] = true
		}
	}
	return named, files, errors.Join(errs...)
}

// isKept says whether file name is one of the last Keep's.
func (d *Dir) isKept(name string) bool {
	d.keepMu.Lock()
	defer d.keepMu.Unlock()
	return d.kept[name]
}

// write writes k's file unless it already holds k, and returns the device
// names it holds. A kind with no device to name has no file: CDI refuses
// a spec without devices.
func (d *Dir) write(k Kind) (map[string]bool, error) {
	s, err := k.Spec()
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(s.Devices))
	for _, dev := range s.Devices {
		names[dev.Name] = true
	}
	if len(names) == 0 {
		return names, nil
	}
	// The library writes json.Marshal of the spec: the same bytes mean the
	// same file.
	want, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	name := FileName(k)
	if have, err := atomicfile.ReadRegular(filepath.Join(d.path, name), maxSpecSize); err == nil && bytes.Equal(have, want) {
		return names, nil
	}
	if err := d.writeSpec(s, name); err != nil {
		return nil, err
	}
	return names, nil
}

// sweep removes the vendor's files of this package that keep does not
// name, and what killed writes left (removeDebris).
func (d *Dir) sweep(keep map[string]bool) error {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return fmt.Errorf("CDI spec directory: %w", err)
	}
	errs := []error{d.removeDebris(entries)}
	for _, e := range entries {
		name := e.Name()
		if keep[name] || d.isKept(name) || !e.Type().IsRegular() || !d.owns(name) {
			continue
		}
		if err := os.Remove(filepath.Join(d.path, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing stale CDI spec: %w", err))
		}
	}
	return errors.Join(errs...)
}

// owns says whether file name is one this package wrote for d's vendor.
// Vendor and class names may both hold '-', so the name alone cannot
// tell vendor "a" from vendor "a-b": the file's kind decides, where it
// can be read.
func (d *Dir) owns(name string) bool {
	if !strings.HasPrefix(name, FilePrefix+cdi.GenerateSpecName(d.vendor, "")) || !strings.HasSuffix(name, ".json") {
		return false
	}
	data, err := atomicfile.ReadRegular(filepath.Join(d.path, name), maxSpecSize)
	if err != nil {
		return false
	}
	var head struct{ Kind string }
	if json.Unmarshal(data, &head) != nil {
		return true // ours by name, and unreadable by any runtime
	}
	vendor, _ := parser.ParseQualifier(head.Kind)
	return vendor == d.vendor
}

// maxSpecSize bounds what is read of a spec file: a spec of this package is a
// few kilobytes per hundred devices.
const maxSpecSize = 16 << 20

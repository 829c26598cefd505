package sysfs

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// fixture is the repository's fake host tree.
func fixture() fs.FS { return os.DirFS("../../../testdata/root") }

// onlyFS hides every optional interface, as a minimal fs.FS would.
type onlyFS struct{ fs.FS }

func link(target string) *fstest.MapFile {
	return &fstest.MapFile{Mode: fs.ModeSymlink, Data: []byte(target)}
}

func file(text string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(text)} }

func TestResolve(t *testing.T) {
	m := fstest.MapFS{
		"a/b/c":      file(""),
		"x/up":       link("../a/b"),
		"x/abs":      link("/a/b"),
		"x/above":    link("../../../a"),
		"x/self":     link("self"),
		"x/ping":     link("pong"),
		"x/pong":     link("ping"),
		"x/dangling": link("nowhere"),
		"x/chain":    link("up/c"),
	}
	tests := []struct {
		fsys    fs.FS
		name    string
		want    string
		wantErr error
	}{
		{fixture(), "sys/class/drm/card1/device", "sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0", nil},
		{fixture(), "sys/class/drm/renderD131/device", "sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0", nil},
		{fixture(), "sys/class/tty/ttyUSB1/device", "sys/devices/pci0000:80/0000:80:08.3/usb3/3-1/3-1:1.0/ttyUSB1", nil},
		{fixture(), "sys/class/drm/card4/device", "sys/devices/platform/vgem", nil},
		{fixture(), "dev/tty13", "dev/tty13", nil},
		{m, ".", ".", nil},
		{m, "x/up", "a/b", nil},
		{m, "x/abs", "a/b", nil},
		{m, "x/above", "a", nil},
		{m, "x/chain", "a/b/c", nil},
		{m, "x/up/c", "a/b/c", nil},
		{m, "x/self", "", ErrLoop},
		{m, "x/ping", "", ErrLoop},
		{m, "x/dangling", "", fs.ErrNotExist},
		{m, "x/missing", "", fs.ErrNotExist},
		{m, "/a", "", fs.ErrInvalid},
		{m, "a/../b", "", fs.ErrInvalid},
		{onlyFS{m}, "x/up", "", errors.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.fsys, tt.name)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr != nil && err == nil) || got != tt.want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDeviceNUMA(t *testing.T) {
	tests := []struct {
		entry string
		want  int // -1: unknown
	}{
		{"sys/class/tty/ttyUSB0", 0},
		{"sys/class/tty/ttyUSB1", 1},
		{"sys/class/tty/ttyACM0", 0},
		{"sys/class/drm/card0", -1}, // the iGPU reports -1
		{"sys/class/drm/card3", 1},
		{"sys/class/drm/card4", -1}, // a platform device has no numa_node
		{"sys/class/tty/ttyUSB9", -1},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			got, err := DeviceNUMA(fixture(), tt.entry)
			if err != nil {
				t.Fatal(err)
			}
			if n := numaValue(got); n != tt.want {
				t.Fatalf("DeviceNUMA(%s) = %d, want %d", tt.entry, n, tt.want)
			}
		})
	}
	t.Run("without symlink support", func(t *testing.T) {
		got, err := DeviceNUMA(onlyFS{fixture()}, "sys/class/tty/ttyUSB1")
		if got != nil || err != nil {
			t.Fatalf("got %v, %v; want unknown and no error", got, err)
		}
	})
}

// TestDeviceDirAgreesWithResolve holds deviceDir's reading of the two
// links as text to Resolve: on every class entry of the fixture, and on
// entries the text cannot answer for, which it must resolve instead.
func TestDeviceDirAgreesWithResolve(t *testing.T) {
	entries, err := fs.Glob(fixture(), "sys/class/*/*")
	if err != nil || len(entries) < 10 {
		t.Fatalf("fixture class entries: %v, %v", entries, err)
	}
	m := fstest.MapFS{
		"sys/devices/pci/usb/tty/ttyUSB0/device": link("../../../usb"),
		"sys/devices/pci/numa_node":              file("1\n"),
		"sys/class/tty/ttyUSB0":                  link("../../devices/pci/usb/tty/ttyUSB0"),
		"sys/class/tty/absolute":                 link("/sys/devices/pci/usb/tty/ttyUSB0"),
		"sys/class/tty/above":                    link("../../../../../../sys/devices/pci/usb/tty/ttyUSB0"),
		"sys/class/tty/old/device":               link("../../../devices/pci/usb"), // a directory, as the deprecated layout has
		"sys/class/tty/dangling":                 link("../../devices/gone"),
		"sys/class/tty/nodevice":                 link("../../devices/pci"),
		"sys/class/tty/chained":                  link("ttyUSB0"),
	}
	cases := []struct {
		fsys fs.FS
		name string
	}{}
	for _, e := range entries {
		cases = append(cases, struct {
			fsys fs.FS
			name string
		}{fixture(), e})
	}
	for _, e := range []string{"ttyUSB0", "absolute", "above", "old", "dangling", "nodevice", "chained", "missing"} {
		cases = append(cases, struct {
			fsys fs.FS
			name string
		}{m, "sys/class/tty/" + e})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, wantErr := Resolve(c.fsys, c.name+"/device")
			got, err := deviceDir(c.fsys, c.name)
			if got != want || (err == nil) != (wantErr == nil) || errors.Is(err, fs.ErrNotExist) != errors.Is(wantErr, fs.ErrNotExist) {
				t.Fatalf("deviceDir = %q, %v; Resolve says %q, %v", got, err, want, wantErr)
			}
		})
	}
	if n, err := DeviceNUMA(m, "sys/class/tty/above"); err != nil || numaValue(n) != 1 {
		t.Fatalf("DeviceNUMA(above) = %d, %v; want 1", numaValue(n), err)
	}
}

func numaValue(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

func TestNUMANode(t *testing.T) {
	m := fstest.MapFS{
		"ok/numa_node":    file("1\n"),
		"minus/numa_node": file("-1\n"),
		"bad/numa_node":   file("one\n"),
		"neg/numa_node":   file("-2\n"),
		"none/vendor":     file("0x8086\n"),
	}
	tests := []struct {
		dir     string
		want    int
		wantErr bool
	}{
		{"ok", 1, false}, {"minus", -1, false}, {"none", -1, false}, {"bad", -1, true}, {"neg", -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			got, err := NUMANode(m, tt.dir)
			if (err != nil) != tt.wantErr || numaValue(got) != tt.want {
				t.Fatalf("NUMANode(%s) = %d, %v; want %d, error %v", tt.dir, numaValue(got), err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestReadStringAndUevent(t *testing.T) {
	m := fstest.MapFS{
		"d/vendor": file("  0x10de\n"),
		"d/uevent": file("DRIVER=nvidia\nPCI_SLOT_NAME=0000:41:00.0\nnoise\n"),
		"big":      file(strings.Repeat("x", maxAttrSize+1)),
	}
	if got, err := ReadString(m, "d/vendor"); got != "0x10de" || err != nil {
		t.Errorf("ReadString = %q, %v", got, err)
	}
	if _, err := ReadString(m, "big"); err == nil {
		t.Error("ReadString of an oversized file succeeded")
	}
	if _, err := ReadString(m, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadString(missing) = %v, want ErrNotExist", err)
	}
	ue, err := Uevent(m, "d")
	if err != nil || ue["DRIVER"] != "nvidia" || ue["PCI_SLOT_NAME"] != "0000:41:00.0" || len(ue) != 2 {
		t.Errorf("Uevent = %v, %v", ue, err)
	}
}

func TestHostToName(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"/dev/dri/card0", "dev/dri/card0", true},
		{"/dev//snd/", "dev/snd", true},
		{"/", "", false},
		{"dev/tty", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := HostToName(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("HostToName(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestClassEntry(t *testing.T) {
	classes, err := Classes(fixture())
	if err != nil || len(classes) == 0 {
		t.Fatalf("Classes = %v, %v", classes, err)
	}
	for base, want := range map[string]string{
		"ttyUSB0": "sys/class/tty/ttyUSB0", "card2": "sys/class/drm/card2", "video0": "", "..": "", "a/b": "",
	} {
		if got := ClassEntry(fixture(), classes, base); got != want {
			t.Errorf("ClassEntry(%q) = %q, want %q", base, got, want)
		}
	}
	if got, err := Classes(fstest.MapFS{}); got != nil || err != nil {
		t.Errorf("Classes of an empty tree = %v, %v; want none", got, err)
	}
}

func TestLinkBase(t *testing.T) {
	got, err := LinkBase(fixture(), "sys/devices/pci0000:00/0000:00:02.0/driver")
	if got != "i915" || err != nil {
		t.Fatalf("LinkBase = %q, %v; want i915", got, err)
	}
	if _, err := LinkBase(fixture(), "sys/devices/pci0000:80/0000:80:01.1/0000:81:00.0/driver"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LinkBase of an unbound device = %v, want ErrNotExist", err)
	}
}

func TestInside(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{"dev/dri", "sys/devices/x"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"dev/card0":     "dri",                // relative, inside
		"dev/up":        "../sys/devices/x",   // climbs, but stays inside
		"dev/out":       "../../../etc",       // climbs above the top
		"dev/host":      "/dev",               // absolute: the host's
		"sys/class":     "../dev",             // inside, then through it
		"sys/devices/y": "../../dev/host/tty", // through a link that leaves
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	fsys := HostFS(root)
	// A missing name is a lookup error, not a way out.
	for name, leaves := range map[string]bool{
		"dev/card0": false, "dev/up": false, "sys/class/card0": false, "dev/missing": false,
		"dev/out": true, "dev/host/tty1": true, "sys/devices/y": true,
	} {
		if err := Inside(fsys, name); errors.Is(err, ErrLeavesTree) != leaves {
			t.Errorf("Inside(%s) = %v, want leaving the tree %v", name, err, leaves)
		}
	}
}

func TestSplitDevice(t *testing.T) {
	// makedev is glibc's makedev(3), the inverse of splitDevice.
	makedev := func(major, minor uint64) uint64 {
		return (major&0xfff)<<8 | (major&^0xfff)<<32 | minor&0xff | (minor&^0xff)<<12
	}
	for _, d := range [][2]uint64{{1, 3}, {4, 64}, {188, 0}, {226, 128}, {259, 1 << 19}, {0xfffff, 0xfffff}, {1<<32 - 1, 1<<32 - 1}} {
		if major, minor := splitDevice(makedev(d[0], d[1])); major != d[0] || minor != d[1] {
			t.Errorf("splitDevice(makedev(%d, %d)) = %d, %d", d[0], d[1], major, minor)
		}
	}
}

// TestNumberEntryOnThisHost holds NumberEntry to the kernel: for every
// device of the machine's sysfs classes that has a node under /dev, the
// entry named by the node's number is the one the class entry's dev
// attribute names, and it leads to the same device.
func TestNumberEntryOnThisHost(t *testing.T) {
	host := HostFS("/")
	devs, err := fs.Glob(host, "sys/class/*/*/dev")
	if err != nil || len(devs) == 0 {
		t.Skipf("no sysfs classes with device numbers here: %v", err)
	}
	checked := 0
	for _, dev := range devs {
		entry := path.Dir(dev)
		node := "dev/" + path.Base(entry)
		fi, err := fs.Stat(host, node)
		if err != nil || fi.Mode()&fs.ModeDevice == 0 {
			continue
		}
		number, err := ReadString(host, dev)
		if err != nil {
			t.Fatal(err)
		}
		kind := "block"
		if fi.Mode()&fs.ModeCharDevice != 0 {
			kind = "char"
		}
		want := "sys/dev/" + kind + "/" + number
		if got := NumberEntry(host, node); got != want {
			t.Errorf("NumberEntry(%s) = %q, want %q (%s)", node, got, want, dev)
			continue
		}
		gotDir, gotErr := deviceDir(host, want)
		wantDir, wantErr := deviceDir(host, entry)
		if gotDir != wantDir || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s leads to %q, %v; %s to %q, %v", want, gotDir, gotErr, entry, wantDir, wantErr)
		}
		checked++
	}
	if checked == 0 {
		t.Skip("no class entry here has a device node under /dev")
	}
	t.Logf("%d device nodes checked", checked)
	for _, name := range []string{"testdata/root/dev/ttyUSB0", "testdata/root/dev", "testdata/root/dev/missing"} {
		if got := NumberEntry(os.DirFS("../../.."), name); got != "" {
			t.Errorf("NumberEntry(%s) = %q, want none: no device node", name, got)
		}
	}
}

package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/plugins/internal/sysfs"
	"github.com/cdiexec/cdi/spec"
)

func fixture() fs.FS { return os.DirFS("../../testdata/root") }

// exampleGroups are the groups of conf.d/dev.d/generic.conf.
const exampleGroups = `{"groups":[
	{"name":"serial","paths":["/dev/ttyUSB*","/dev/ttyACM*"]},
	{"name":"video","paths":["/dev/video*"]},
	{"name":"sound","paths":["/dev/snd/*"],"perDevice":"all"}]}`

func host(t *testing.T, fsys fs.FS, args string) (*engine.Host, *bytes.Buffer) {
	t.Helper()
	cfg, err := spec.ParseConfig([]byte(`{"cdiVersion":"0.1.0","name":"devices","type":"dev","plugin":"generic","args":` + args + `}`))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	return &engine.Host{Config: cfg, Root: "/", FS: fsys, Stderr: &stderr}, &stderr
}

func discoverOK(t *testing.T, fsys fs.FS, args string) (*engine.Inventory, string) {
	t.Helper()
	h, stderr := host(t, fsys, args)
	inv, err := discover(h)
	if err != nil {
		t.Fatal(err)
	}
	return inv, stderr.String()
}

func ids(inv *engine.Inventory) []string {
	var out []string
	for _, d := range inv.Devices {
		out = append(out, d.ID)
	}
	return out
}

func numa(n int) *int { return &n }

func TestDiscoverFixture(t *testing.T) {
	inv, stderr := discoverOK(t, fixture(), exampleGroups)
	wantRes := []spec.ResourceSpec{{Type: "dev", Subtype: "serial"}, {Type: "dev", Subtype: "video"}, {Type: "dev", Subtype: "sound"}}
	if !reflect.DeepEqual(inv.Resources, wantRes) {
		t.Errorf("resources %v, want %v", inv.Resources, wantRes)
	}
	wantIDs := []string{"serial-ttyACM0", "serial-ttyUSB0", "serial-ttyUSB1", "video-video0", "video-video1", "video-video2", "video-video3", "sound"}
	if got := ids(inv); !reflect.DeepEqual(got, wantIDs) {
		t.Fatalf("ids %v, want %v", got, wantIDs)
	}
	serial1 := inv.Devices[2]
	want := engine.Device{
		ID: "serial-ttyUSB1", Resource: wantRes[0], Healthy: true, NUMANode: numa(1),
		Nodes:      []spec.DeviceNode{{HostPath: "/dev/ttyUSB1", ContainerPath: "/dev/ttyUSB1", Permissions: "rw"}},
		Properties: map[string]string{"group": "serial", "path": "/dev/ttyUSB1"},
	}
	if !reflect.DeepEqual(serial1, want) {
		t.Errorf("got  %+v\nwant %+v", serial1, want)
	}
	if n := inv.Devices[0].NUMANode; n == nil || *n != 0 {
		t.Errorf("ttyACM0 NUMA %v, want 0 (its host controller's)", n)
	}
	if inv.Devices[3].NUMANode != nil {
		t.Errorf("video0 NUMA %v, want unknown", *inv.Devices[3].NUMANode)
	}
	sound := inv.Devices[7]
	var paths []string
	for _, n := range sound.Nodes {
		paths = append(paths, n.HostPath)
	}
	wantPaths := []string{"/dev/snd/controlC0", "/dev/snd/pcmC0D0c", "/dev/snd/pcmC0D0p", "/dev/snd/timer"}
	if !reflect.DeepEqual(paths, wantPaths) || !sound.Healthy || sound.Properties["path"] != strings.Join(wantPaths, ",") {
		t.Errorf("bundled sound device %+v, want nodes %v (by-path directory skipped)", sound, wantPaths)
	}
	if stderr != "" {
		t.Errorf("unexpected diagnostics: %s", stderr)
	}
}

// An ADD that wants some groups' devices gets exactly those of a whole
// discovery, while the other groups still claim their paths and ids: the
// catch-all below gets no serial port whichever group is wanted.
func TestDiscoverWanted(t *testing.T) {
	for _, args := range []string{exampleGroups, `{"groups":[
		{"name":"usb","paths":["/dev/ttyUSB*"]},
		{"name":"all","paths":["/dev/tty*"]}]}`} {
		all, _ := discoverOK(t, fixture(), args)
		for _, wanted := range all.Resources {
			t.Run(wanted.String(), func(t *testing.T) {
				h, _ := host(t, fixture(), args)
				h.Wanted = []spec.ResourceSpec{wanted}
				got, err := discover(h)
				if err != nil {
					t.Fatal(err)
				}
				want := &engine.Inventory{Resources: all.Resources}
				for _, d := range all.Devices {
					if d.Resource == wanted {
						want.Devices = append(want.Devices, d)
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got  %+v\nwant %+v", got, want)
				}
			})
		}
	}
}

// readDirs records the directories listed through it.
type readDirs struct {
	fs.FS
	listed []string
}

func (r *readDirs) ReadDir(name string) ([]fs.DirEntry, error) {
	r.listed = append(r.listed, name)
	return fs.ReadDir(r.FS, name)
}

// The groups after the last one an ADD wants are not matched: nothing
// they match could be taken from the groups before them.
func TestDiscoverStopsAfterTheLastWanted(t *testing.T) {
	all, _ := discoverOK(t, fixture(), exampleGroups)
	fsys := &readDirs{FS: fixture()}
	h, _ := host(t, fsys, exampleGroups)
	h.Wanted = []spec.ResourceSpec{all.Resources[0]} // serial
	got, err := discover(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 3 || slices.Contains(fsys.listed, "dev/snd") {
		t.Errorf("%d devices, directories listed %v; want the 3 serial ports, and dev/snd (sound, after serial) never listed",
			len(got.Devices), fsys.listed)
	}
}

// discoverBoth discovers the example groups on the fixture twice: as INFO
// does, and with the Host changed by set. Both find the same devices.
func discoverBoth(t *testing.T, set func(*engine.Host)) (all, got *engine.Inventory) {
	t.Helper()
	all, _ = discoverOK(t, fixture(), exampleGroups)
	h, _ := host(t, fixture(), exampleGroups)
	set(h)
	got, err := discover(h)
	if err != nil || len(got.Devices) != len(all.Devices) {
		t.Fatalf("%d devices, %v; want %d", len(got.Devices), err, len(all.Devices))
	}
	return all, got
}

// Where the call defers NUMA lookups, a device's LookUpNUMA finds what a
// whole discovery puts in NUMANode.
func TestDiscoverDefersNUMA(t *testing.T) {
	all, got := discoverBoth(t, func(h *engine.Host) { h.DeferNUMA = true })
	for i, d := range got.Devices {
		if d.NUMANode != nil || d.LookUpNUMA == nil {
			t.Fatalf("%s: NUMANode %v and no lookup; want it deferred", d.ID, d.NUMANode)
		}
		if n := d.LookUpNUMA(); !reflect.DeepEqual(n, all.Devices[i].NUMANode) {
			t.Errorf("%s: looked up %v, want %v", d.ID, n, all.Devices[i].NUMANode)
		}
	}
}

// An ADD's discovery (SkipProperties) makes no properties: only INFO shows
// them. The devices are the same otherwise.
func TestDiscoverSkipsProperties(t *testing.T) {
	all, got := discoverBoth(t, func(h *engine.Host) { h.SkipProperties = true })
	for i, d := range got.Devices {
		if d.Properties != nil {
			t.Errorf("%s: properties %v, want none", d.ID, d.Properties)
		}
		d.Properties = all.Devices[i].Properties
		if !reflect.DeepEqual(d, all.Devices[i]) {
			t.Errorf("device %d is %+v, want %+v apart from its properties", i, d, all.Devices[i])
		}
	}
}

// TestFirstGroupWins checks that a catch-all group after a specific one
// does not get the specific group's nodes again.
func TestFirstGroupWins(t *testing.T) {
	inv, _ := discoverOK(t, fixture(), `{"groups":[
		{"name":"usb","paths":["/dev/ttyUSB*"],"permissions":"r"},
		{"paths":["/dev/tty*"]}]}`)
	got := ids(inv)
	if len(got) != 2+1+45+4+1 {
		t.Fatalf("%d devices: %v", len(got), got)
	}
	if got[0] != "usb-ttyUSB0" || got[1] != "usb-ttyUSB1" || got[2] != "tty" || got[3] != "tty0" || got[4] != "tty1" || got[5] != "tty2" {
		t.Errorf("order %v", got[:6])
	}
	for _, id := range got[2:] {
		if strings.Contains(id, "USB") {
			t.Errorf("%s matched by the catch-all group too", id)
		}
	}
	if p := inv.Devices[0].Nodes[0].Permissions; p != "r" {
		t.Errorf("permissions %q, want r", p)
	}
	if inv.Devices[2].Resource != (spec.ResourceSpec{Type: "dev"}) {
		t.Errorf("unnamed group serves %v, want the bare type", inv.Devices[2].Resource)
	}
}

func TestDiscoverEdgeCases(t *testing.T) {
	tests := []struct {
		name, args string
		fsys       fs.FS
		ids        []string
		healthy    []bool
		stderr     string
	}{
		{"missing dirs", exampleGroups, fstest.MapFS{}, nil, nil, ""},
		{"natural order", `{"groups":[{"name":"s","paths":["/dev/ttyUSB*"]}]}`,
			fstest.MapFS{"dev/ttyUSB10": {}, "dev/ttyUSB2": {}, "dev/ttyUSB1": {}},
			[]string{"s-ttyUSB1", "s-ttyUSB2", "s-ttyUSB10"}, []bool{true, true, true}, ""},
		{"dangling link is unhealthy", `{"groups":[{"name":"cam","paths":["/dev/video*"]}]}`,
			fstest.MapFS{"dev/video0": {}, "dev/video1": {Mode: fs.ModeSymlink, Data: []byte("gone")}},
			[]string{"cam-video0", "cam-video1"}, []bool{true, false}, ""},
		{"bundle with a dangling link", `{"groups":[{"name":"snd","paths":["/dev/snd/*"],"perDevice":"all"}]}`,
			fstest.MapFS{"dev/snd/timer": {}, "dev/snd/x": {Mode: fs.ModeSymlink, Data: []byte("gone")}},
			[]string{"snd"}, []bool{false}, ""},
		{"unnamed bundle takes the type", `{"groups":[{"paths":["/dev/snd/*"],"perDevice":"all"}]}`,
			fstest.MapFS{"dev/snd/timer": {}}, []string{"dev"}, []bool{true}, ""},
		{"nested paths and odd characters", `{"groups":[{"name":"in","paths":["/dev/input/*/*"]}]}`,
			fstest.MapFS{"dev/input/by-id/usb-Logi+Cam": {}, "dev/input/by-id/usb-Logi_Cam": {}, "dev/input/by-id/ok": {}},
			[]string{"in-input_by-id_ok", "in-input_by-id_usb-Logi_Cam"}, []bool{true, true}, `skipped device "/dev/input/by-id/usb-Logi_Cam" (bad-id)`},
		{"ids end as CDI names do", `{"groups":[{"name":"x","paths":["/dev/x*"]}]}`,
			fstest.MapFS{"dev/x1": {}, "dev/x1_": {}, "dev/x2.": {}, "dev/x3-": {}, "dev/x4:": {}, "dev/x5+": {}},
			[]string{"x-x1"}, []bool{true}, `skipped device "/dev/x1_" (bad-id)`},
		{"outside /dev", `{"groups":[{"name":"x","paths":["/run/dev?"]}]}`,
			fstest.MapFS{"run/dev1": {}}, []string{"x-run_dev1"}, []bool{true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, stderr := discoverOK(t, tt.fsys, tt.args)
			if got := ids(inv); !reflect.DeepEqual(got, tt.ids) {
				t.Fatalf("ids %v, want %v", got, tt.ids)
			}
			for i, d := range inv.Devices {
				if d.Healthy != tt.healthy[i] {
					t.Errorf("%s healthy %v, want %v", d.ID, d.Healthy, tt.healthy[i])
				}
			}
			if !strings.Contains(stderr, tt.stderr) || (tt.stderr == "" && stderr != "") {
				t.Errorf("stderr %q, want %q", stderr, tt.stderr)
			}
			if len(inv.Resources) == 0 {
				t.Error("no resource-spec served")
			}
		})
	}
}

func TestBadArgs(t *testing.T) {
	for _, args := range []string{
		`{}`,
		`{"groups":{}}`,
		`{"groups":[]}`,
		`{"groups":[{"name":"a","paths":["/dev/a"],"perDevices":"all"}]}`,
		`{"groups":[{"name":5,"paths":["/dev/a"]}]}`,
		`{"groups":[{"name":"ser-ial","paths":["/dev/a"]}]}`,
		`{"groups":[{"name":"abcdefghijklmnop","paths":["/dev/a"]}]}`,
		`{"groups":[{"name":"a_b","paths":["/dev/a"]}]}`,
		`{"groups":[{"name":"a","paths":["/dev/a"]},{"name":"a","paths":["/dev/b"]}]}`,
		`{"groups":[{"paths":["/dev/a"]},{"paths":["/dev/b"]}]}`,
		`{"groups":[{"name":"a"}]}`,
		`{"groups":[{"name":"a","paths":["dev/a"]}]}`,
		`{"groups":[{"name":"a","paths":["/dev/../etc/x"]}]}`,
		`{"groups":[{"name":"a","paths":["/dev/"]}]}`,
		`{"groups":[{"name":"a","paths":["/"]}]}`,
		`{"groups":[{"name":"a","paths":["/dev/[a"]}]}`,
		`{"groups":[{"name":"a","paths":["/dev/a"],"perDevice":"each"}]}`,
		`{"groups":[{"name":"a","paths":["/dev/a"],"permissions":"rx"}]}`,
		`{"groups":[{"name":"a","paths":["/dev/a"],"permissions":"rr"}]}`,
	} {
		t.Run(args, func(t *testing.T) {
			h, _ := host(t, fstest.MapFS{}, args)
			_, err := discover(h)
			if spec.CodeOf(err) != spec.CodeInvalidConfig {
				t.Fatalf("error %v, want code %d", err, spec.CodeInvalidConfig)
			}
		})
	}
}

func TestNaturalLess(t *testing.T) {
	in := []string{"ttyUSB10", "ttyUSB2", "ttyACM0", "ttyUSB1", "ttyUSB01", "tty", "ttyUSB", "video0", "ttyUSB100000000000000000000", "ttyUSB99999999999999999999"}
	want := []string{"tty", "ttyACM0", "ttyUSB", "ttyUSB01", "ttyUSB1", "ttyUSB2", "ttyUSB10", "ttyUSB99999999999999999999", "ttyUSB100000000000000000000", "video0"}
	sort.Slice(in, func(i, j int) bool { return naturalLess(in[i], in[j]) })
	if !reflect.DeepEqual(in, want) {
		t.Fatalf("got  %v\nwant %v", in, want)
	}
	for _, s := range want {
		if naturalLess(s, s) {
			t.Errorf("naturalLess(%q, %q) is true", s, s)
		}
	}
}

// A node reached through a link named unlike any class entry, as
// /dev/serial/by-id/... is, gets its device's NUMA node through the
// node's device number. It needs a real character device node, which
// only root can make.
func TestNUMAByDeviceNumber(t *testing.T) {
	root := t.TempDir()
	dev := "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/ttyUSB7/tty/ttyUSB7"
	for name, target := range map[string]string{
		"dev/serial/by-id/usb-FTDI_FT232R-if00-port0": "../../ttyUSB7",
		"sys/dev/char/188:7":                          "../../" + strings.TrimPrefix(dev, "sys/"),
		dev + "/device":                               "../../../ttyUSB7",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "sys/devices/pci0000:00/0000:00:14.0/numa_node"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mknod(filepath.Join(root, "dev/ttyUSB7"), syscall.S_IFCHR|0o600, 188<<8|7)
	if errors.Is(err, syscall.EPERM) {
		t.Skip("making a device node needs root")
	}
	if err != nil {
		t.Fatal(err)
	}
	inv, stderr := discoverOK(t, sysfs.HostFS(root), `{"groups":[{"name":"serial","paths":["/dev/serial/by-id/*"]}]}`)
	if len(inv.Devices) != 1 || inv.Devices[0].NUMANode == nil || *inv.Devices[0].NUMANode != 1 {
		t.Fatalf("devices %+v (stderr %q); want one, on NUMA node 1", inv.Devices, stderr)
	}
}

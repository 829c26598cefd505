package main

import (
	"bytes"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
)

// onlyFS hides fs.ReadLinkFS, forcing the uevent fallback.
type onlyFS struct{ fs.FS }

func fixture() fs.FS { return os.DirFS("../../testdata/root") }

// host returns a Host for a gpu configuration with the given args JSON.
func host(t *testing.T, fsys fs.FS, args string) (*engine.Host, *bytes.Buffer) {
	t.Helper()
	cfg, err := spec.ParseConfig([]byte(`{"cdiVersion":"0.1.0","name":"GPUs","type":"gpu","plugin":"drm","args":` + args + `}`))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	return &engine.Host{Config: cfg, Root: "/", FS: fsys, Stderr: &stderr}, &stderr
}

func ids(inv *engine.Inventory) []string {
	var out []string
	for _, d := range inv.Devices {
		out = append(out, d.ID)
	}
	return out
}

func numa(n int) *int { return &n }

func nodes(paths ...string) []spec.DeviceNode {
	var out []spec.DeviceNode
	for _, p := range paths {
		out = append(out, spec.DeviceNode{HostPath: p, ContainerPath: p, Permissions: "rw"})
	}
	return out
}

func TestDiscoverFixture(t *testing.T) {
	gpu := spec.ResourceSpec{Type: "gpu"}
	want := []engine.Device{
		{ID: "0000:00:02.0", Resource: gpu, Nodes: nodes("/dev/dri/card0", "/dev/dri/renderD128"), Healthy: true,
			Properties: map[string]string{"pciAddress": "0000:00:02.0", "vendor": "0x8086", "device": "0x3e92", "card": "card0", "renderNode": "renderD128", "driver": "i915"}},
		{ID: "0000:03:00.0", Resource: gpu, Nodes: nodes("/dev/dri/card1", "/dev/dri/renderD129"), Healthy: true, NUMANode: numa(0),
			Properties: map[string]string{"pciAddress": "0000:03:00.0", "vendor": "0x1002", "device": "0x73bf", "card": "card1", "renderNode": "renderD129", "driver": "amdgpu"}},
		{ID: "0000:41:00.0", Resource: gpu, Nodes: nodes("/dev/dri/card2", "/dev/dri/renderD130"), Healthy: true, NUMANode: numa(0),
			Properties: map[string]string{"pciAddress": "0000:41:00.0", "vendor": "0x10de", "device": "0x20b0", "card": "card2", "renderNode": "renderD130", "driver": "nvidia"}},
		{ID: "0000:81:00.0", Resource: gpu, Nodes: nodes("/dev/dri/card3", "/dev/dri/renderD131"), Healthy: true, NUMANode: numa(1),
			Properties: map[string]string{"pciAddress": "0000:81:00.0", "vendor": "0x10de", "device": "0x20b0", "card": "card3", "renderNode": "renderD131"}},
	}
	for name, fsys := range map[string]fs.FS{"symlinks": fixture(), "uevent fallback": onlyFS{fixture()}} {
		t.Run(name, func(t *testing.T) {
			h, stderr := host(t, fsys, `{}`)
			inv, err := discover(h)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inv.Resources, []spec.ResourceSpec{gpu}) {
				t.Errorf("resources %v, want [gpu]", inv.Resources)
			}
			if !reflect.DeepEqual(inv.Devices, want) {
				t.Errorf("devices\n got %+v\nwant %+v", inv.Devices, want)
			}
			if stderr.Len() > 0 {
				t.Errorf("unexpected diagnostics: %s", stderr)
			}
		})
	}
}

// Where nothing shows properties (ADD), discovery finds the same devices
// without them, the vendor whitelist still applied, and NUMA nodes
// deferred find what a whole discovery does.
func TestDiscoverForAllocation(t *testing.T) {
	for _, args := range []string{`{}`, `{"vendorid_whitelist":["0x10de"]}`} {
		t.Run(args, func(t *testing.T) {
			full, _ := host(t, fixture(), args)
			want, err := discover(full)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want.Devices {
				want.Devices[i].Properties = nil
			}
			brief, _ := host(t, fixture(), args)
			brief.SkipProperties, brief.DeferNUMA = true, true
			got, err := discover(brief)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got.Devices {
				d := &got.Devices[i]
				if d.LookUpNUMA == nil {
					t.Fatalf("%s: NUMA node not deferred", d.ID)
				}
				d.NUMANode, d.LookUpNUMA = d.LookUpNUMA(), nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestDiscoverArgs(t *testing.T) {
	tests := []struct {
		name, args string
		ids        []string
		nodes      []string // of the first device
	}{
		{"whitelist intel", `{"vendorid_whitelist":["0x8086"]}`, []string{"0000:00:02.0"}, []string{"/dev/dri/card0", "/dev/dri/renderD128"}},
		{"whitelist case-insensitive", `{"vendorid_whitelist":["0x10DE"]}`, []string{"0000:41:00.0", "0000:81:00.0"}, []string{"/dev/dri/card2", "/dev/dri/renderD130"}},
		{"draft whitelist matches nothing", `{"vendorid_whitelist":["0x1234","0x2345"]}`, nil, nil},
		{"empty whitelist is all", `{"vendorid_whitelist":[]}`, []string{"0000:00:02.0", "0000:03:00.0", "0000:41:00.0", "0000:81:00.0"}, []string{"/dev/dri/card0", "/dev/dri/renderD128"}},
		{"null args are defaults", `{"vendorid_whitelist":null,"want_device_nodes":null}`, []string{"0000:00:02.0", "0000:03:00.0", "0000:41:00.0", "0000:81:00.0"}, []string{"/dev/dri/card0", "/dev/dri/renderD128"}},
		{"render only", `{"want_device_nodes":["render"],"vendorid_whitelist":["0x1002"]}`, []string{"0000:03:00.0"}, []string{"/dev/dri/renderD129"}},
		{"primary only", `{"want_device_nodes":["primary","primary"]}`, []string{"0000:00:02.0", "0000:03:00.0", "0000:41:00.0", "0000:81:00.0"}, []string{"/dev/dri/card0"}},
		{"draft order", `{"want_device_nodes":["render","primary"],"vendorid_whitelist":["0x8086"]}`, []string{"0000:00:02.0"}, []string{"/dev/dri/card0", "/dev/dri/renderD128"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := host(t, fixture(), tt.args)
			inv, err := discover(h)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(inv); !reflect.DeepEqual(got, tt.ids) {
				t.Fatalf("ids %v, want %v", got, tt.ids)
			}
			if len(inv.Devices) > 0 && !reflect.DeepEqual(inv.Devices[0].Nodes, nodes(tt.nodes...)) {
				t.Fatalf("nodes %v, want %v", inv.Devices[0].Nodes, tt.nodes)
			}
		})
	}
}

func TestBadArgs(t *testing.T) {
	for _, args := range []string{
		`{"want_device_nodes":["primary","bogus"]}`,
		`{"want_device_nodes":[]}`,
		`{"want_device_nodes":"primary"}`,
		`{"want_device_nodes":[1]}`,
		`{"vendorid_whitelist":["8086"]}`,
		`{"vendorid_whitelist":"0x8086"}`,
		`{"vendorid_whitelist":["0x80861"]}`,
		`{"vendorid_whitelist":["0xzzzz"]}`,
	} {
		t.Run(args, func(t *testing.T) {
			h, _ := host(t, fixture(), args)
			_, err := discover(h)
			if spec.CodeOf(err) != spec.CodeInvalidConfig {
				t.Fatalf("error %v, want code %d", err, spec.CodeInvalidConfig)
			}
		})
	}
}

// pciGPU returns a minimal sysfs tree for one GPU at addr with card<n>.
func pciGPU(addr, vendor string, n string) fstest.MapFS {
	dir := "sys/devices/pci0000:00/" + addr
	return fstest.MapFS{
		dir + "/vendor":                            {Data: []byte(vendor + "\n")},
		dir + "/numa_node":                         {Data: []byte("0\n")},
		dir + "/drm/card" + n + "/device":          {Mode: fs.ModeSymlink, Data: []byte("../../../" + addr)},
		"sys/class/drm/card" + n:                   {Mode: fs.ModeSymlink, Data: []byte("../../devices/pci0000:00/" + addr + "/drm/card" + n)},
		"dev/dri/card" + n:                         {},
		dir + "/drm/card" + n + "-HDMI-A-1/uevent": {Data: []byte("DEVTYPE=drm_connector\n")},
	}
}

func merge(ms ...fstest.MapFS) fstest.MapFS {
	out := fstest.MapFS{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestDiscoverEdgeCases(t *testing.T) {
	unreadable := merge(pciGPU("0000:01:00.0", "0x8086", "0"), fstest.MapFS{
		// a directory where the vendor attribute should be: reading fails
		"sys/devices/pci0000:00/0000:01:00.0/vendor": {Mode: fs.ModeDir},
	})
	missingNode := pciGPU("0000:02:00.0", "0x8086", "1")
	delete(missingNode, "dev/dri/card1")
	badNUMA := pciGPU("0000:03:00.0", "0x1002", "2")
	badNUMA["sys/devices/pci0000:00/0000:03:00.0/numa_node"] = &fstest.MapFile{Data: []byte("x\n")}
	tests := []struct {
		name, args string
		fsys       fs.FS
		ids        []string
		healthy    bool
		stderr     string
	}{
		{"no sys at all", `{}`, fstest.MapFS{}, nil, true, ""},
		{"empty class dir", `{}`, fstest.MapFS{"sys/class/drm/version": {Data: []byte("drm 1.1.0\n")}}, nil, true, ""},
		{"unreadable vendor, no whitelist", `{}`, unreadable, []string{"0000:01:00.0"}, true, ""},
		{"unreadable vendor, whitelist", `{"vendorid_whitelist":["0x8086"]}`, unreadable, nil, true, "vendor unknown"},
		{"missing node is unhealthy", `{}`, missingNode, []string{"0000:02:00.0"}, false, ""},
		{"bad numa_node is unknown", `{}`, badNUMA, []string{"0000:03:00.0"}, true, "NUMA node unknown"},
		{"natural minor order, grouped by address", `{}`, merge(pciGPU("0000:0a:00.0", "0x8086", "10"), pciGPU("0000:09:00.0", "0x8086", "9")), []string{"0000:09:00.0", "0000:0a:00.0"}, true, ""},
		{"dangling device link is skipped", `{}`, fstest.MapFS{"sys/class/drm/card0/device": {Mode: fs.ModeSymlink, Data: []byte("../../nowhere")}}, nil, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, stderr := host(t, tt.fsys, tt.args)
			inv, err := discover(h)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(inv); !reflect.DeepEqual(got, tt.ids) {
				t.Fatalf("ids %v, want %v", got, tt.ids)
			}
			for _, d := range inv.Devices {
				if d.Healthy != tt.healthy {
					t.Errorf("%s healthy %v, want %v", d.ID, d.Healthy, tt.healthy)
				}
			}
			if !strings.Contains(stderr.String(), tt.stderr) || (tt.stderr == "" && stderr.Len() > 0) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.stderr)
			}
		})
	}
}

func TestMinorKind(t *testing.T) {
	tests := []struct {
		name string
		kind string
		n    int
	}{
		{"card0", kindPrimary, 0}, {"card12", kindPrimary, 12}, {"renderD128", kindRender, 128},
		{"card0-eDP-1", "", 0}, {"card", "", 0}, {"card01", "", 0}, {"renderD", "", 0},
		{"controlD64", "", 0}, {"version", "", 0}, {"ttyUSB0", "", 0},
	}
	for _, tt := range tests {
		kind, n, ok := minorKind(tt.name)
		if kind != tt.kind || n != tt.n || ok != (tt.kind != "") {
			t.Errorf("minorKind(%q) = %q, %d, %v; want %q, %d", tt.name, kind, n, ok, tt.kind, tt.n)
		}
	}
}

func TestIsPCIAddress(t *testing.T) {
	for s, want := range map[string]bool{
		"0000:00:02.0": true, "0000:81:00.7": true, "10000:e1:00.0": true, "0000:AB:1f.3": true,
		"0000:00:02.8": false, "00:02.0": false, "0000:00:02": false, "vgem": false, "1-2:1.0": false, "0000:0g:00.0": false,
	} {
		if got := isPCIAddress(s); got != want {
			t.Errorf("isPCIAddress(%q) = %v, want %v", s, got, want)
		}
	}
}

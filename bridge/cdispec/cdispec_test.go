package cdispec

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"syscall"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdiexec/cdi/spec"
)

// null is a character device every Linux machine has, so that the CDI
// library can stat it as the runtime would.
var nullNode = spec.DeviceNode{HostPath: "/dev/null", ContainerPath: "/dev/cdi-null", Permissions: "rw"}

func TestKindSpec(t *testing.T) {
	k := Kind{Vendor: "cdi.test", Class: "tty-generic", Devices: []Device{
		{Name: "tty9", Nodes: []spec.DeviceNode{{HostPath: "/dev/tty9"}}},
		{Name: "lobby"}, // no node: nothing a spec could hold
		{Name: "tty2", Nodes: []spec.DeviceNode{nullNode}},
	}}
	s, err := k.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != "cdi.test/tty-generic" || s.Version != "0.5.0" {
		t.Errorf("kind %q version %q, want cdi.test/tty-generic 0.5.0 (hostPath needs 0.5.0, nothing more)", s.Kind, s.Version)
	}
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.Name)
	}
	if !reflect.DeepEqual(names, []string{"tty2", "tty9"}) {
		t.Fatalf("devices %v, want tty2 and tty9, sorted, without lobby", names)
	}
	n := s.Devices[1].ContainerEdits.DeviceNodes[0]
	if n.Path != "/dev/tty9" || n.HostPath != "/dev/tty9" || n.Permissions != spec.DefaultPermissions {
		t.Errorf("a node with no container path or permissions became %+v, want the host path and %q", *n, spec.DefaultPermissions)
	}
	n = s.Devices[0].ContainerEdits.DeviceNodes[0]
	if n.Path != "/dev/cdi-null" || n.HostPath != "/dev/null" || n.Permissions != "rw" {
		t.Errorf("node %+v, want the plugin's container path and permissions", *n)
	}
}

func TestKindSpecRefusesWhatCDIRefuses(t *testing.T) {
	node := []spec.DeviceNode{nullNode}
	for name, k := range map[string]Kind{
		"class ending in _":        {Vendor: "cdi.test", Class: "gpu_", Devices: []Device{{Name: "a", Nodes: node}}},
		"class starting with 3":    {Vendor: "cdi.test", Class: "3com", Devices: []Device{{Name: "a", Nodes: node}}},
		"vendor with a slash":      {Vendor: "cdi/test", Class: "gpu", Devices: []Device{{Name: "a", Nodes: node}}},
		"device ending in colon":   {Vendor: "cdi.test", Class: "gpu", Devices: []Device{{Name: "0000:00:02.0:", Nodes: node}}},
		"device with a slash":      {Vendor: "cdi.test", Class: "gpu", Devices: []Device{{Name: "a/b", Nodes: node}}},
		"device name with a space": {Vendor: "cdi.test", Class: "gpu", Devices: []Device{{Name: "a b", Nodes: node}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := k.Spec(); err == nil {
				t.Errorf("%+v: no error", k)
			}
		})
	}
}

// resolve injects names with the CNCF library reading dir, as a runtime
// does, and returns the OCI spec it produced.
func resolve(t *testing.T, dir string, names ...string) *oci.Spec {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the library finds errors in %s: %v", dir, errs)
	}
	s := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(s, names...); err != nil {
		t.Fatalf("unresolved %v: %v", unresolved, err)
	}
	return s
}

func TestSyncWritesWhatTheLibraryResolves(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []Kind{
		{Vendor: "cdi.test", Class: "tty-a", Devices: []Device{{Name: "null0", Nodes: []spec.DeviceNode{nullNode}}}},
		{Vendor: "cdi.test", Class: "camera-b", Devices: []Device{{Name: "lobby"}}},
	}
	named, err := d.Sync(kinds)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(named, map[string]map[string]bool{"tty-a": {"null0": true}, "camera-b": {}}) {
		t.Fatalf("named %v", named)
	}
	s := resolve(t, dir, kinds[0].QualifiedName("null0"))
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/cdi-null" || s.Linux.Devices[0].Type != "c" {
		t.Fatalf("injected devices %+v, want /dev/cdi-null, a character device", s.Linux.Devices)
	}
	rules := s.Linux.Resources.Devices
	if len(rules) != 1 || rules[0].Access != "rw" || !rules[0].Allow {
		t.Errorf("device cgroup rules %+v, want one allowing rw, the plugin's permissions", rules)
	}
}

func TestSyncKeepsUnchangedFilesAndSweepsItsOwn(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	tty := Kind{Vendor: "a", Class: "tty", Devices: []Device{{Name: "n", Nodes: []spec.DeviceNode{nullNode}}}}
	gpu := Kind{Vendor: "a", Class: "gpu", Devices: []Device{{Name: "n", Nodes: []spec.DeviceNode{nullNode}}}}
	if _, err := d.Sync([]Kind{tty, gpu}); err != nil {
		t.Fatal(err)
	}
	before := stat(t, filepath.Join(dir, FileName(tty)))
	others := map[string]string{
		"vendor-x.json":                  `{"cdiVersion":"0.5.0","kind":"vendor.example/x","devices":[]}`, // another producer
		FilePrefix + "a-b-gpu.json":      `{"cdiVersion":"0.5.0","kind":"a-b/gpu","devices":[]}`,          // vendor a-b, not a
		FilePrefix + "a-stale.json.tmp":  `leftover`,                                                      // not a spec name
		FilePrefix + "a-old.json":        `{"cdiVersion":"0.5.0","kind":"a/old","devices":[]}`,            // ours, gone
		FilePrefix + "a-unreadable.json": `{`,                                                             // ours by name, broken
	}
	for name, content := range others {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Sync([]Kind{tty}); err != nil {
		t.Fatal(err)
	}
	if after := stat(t, filepath.Join(dir, FileName(tty))); !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) {
		t.Errorf("an unchanged spec was written again")
	}
	want := []string{FileName(tty), "vendor-x.json", FilePrefix + "a-b-gpu.json", FilePrefix + "a-stale.json.tmp"}
	if got := list(t, dir); !reflect.DeepEqual(got, sorted(want)) {
		t.Errorf("directory holds %v, want %v", got, sorted(want))
	}
}

func TestSyncWritesTheValidKindsOfAMixedSet(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	good := Kind{Vendor: "a", Class: "tty", Devices: []Device{{Name: "n", Nodes: []spec.DeviceNode{nullNode}}}}
	bad := Kind{Vendor: "a", Class: "gpu", Devices: []Device{{Name: "n:", Nodes: []spec.DeviceNode{nullNode}}}}
	other := Kind{Vendor: "b", Class: "gpu"}
	named, err := d.Sync([]Kind{bad, good, other})
	if err == nil {
		t.Fatal("no error for an invalid device name and a kind of another vendor")
	}
	if !named["tty"]["n"] || named["gpu"] != nil {
		t.Errorf("named %v, want tty's n alone", named)
	}
	resolve(t, dir, good.QualifiedName("n"))
}

func TestOpenRefusesAnInvalidVendor(t *testing.T) {
	if _, err := Open(t.TempDir(), "cdi/local"); err == nil {
		t.Error("vendor cdi/local accepted")
	}
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func list(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return sorted(names)
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

// A FIFO or a link placed at a spec's name neither blocks Sync nor is
// written through: the library's writer renames a new file over it.
func TestSyncOverAFIFOAndALink(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	tty := Kind{Vendor: "a", Class: "tty", Devices: []Device{{Name: "n", Nodes: []spec.DeviceNode{nullNode}}}}
	gpu := Kind{Vendor: "a", Class: "gpu", Devices: []Device{{Name: "n", Nodes: []spec.DeviceNode{nullNode}}}}
	if err := syscall.Mkfifo(filepath.Join(dir, FileName(tty)), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, FileName(gpu))); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := d.Sync([]Kind{tty, gpu}); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sync blocked on a FIFO at a spec's name")
	}
	if data, _ := os.ReadFile(target); string(data) != "keep" {
		t.Errorf("the link's target became %q", data)
	}
	resolve(t, dir, tty.QualifiedName("n"), gpu.QualifiedName("n"))
}

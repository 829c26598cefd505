package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// The project's default drop-ins, over the fixture host: every pool the
// bridge serves, at both levels.
var defaultPools = []string{"camera-endpoint", "dev-serial-generic", "dev-sound-generic", "dev-video-generic", "gpu-drm", "tty-generic"}

// TestCDINamesResolve runs the bridge over every default drop-in and
// allocates from every resource it registers. Every CDI name in every
// response must resolve, through the CNCF library a runtime uses, against
// the spec files the bridge wrote; each device node must reach the
// container once, by CDI name or device spec; where the host has the
// nodes, the library must inject them.
func TestCDINamesResolve(t *testing.T) {
	cdiDir := t.TempDir()
	k := startDefaultBridge(t, cdiDir)
	for _, p := range defaultPools {
		if _, err := k.WaitFor("cdi.test/"+p, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) > 0 }); err != nil {
			t.Fatalf("pool %s: %v", p, err)
		}
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("the CDI library finds errors in the bridge's spec files: %v", errs)
	}
	// The pools first: an Instance-level claim could take a pool's last
	// free slot.
	resources := []string{}
	for _, p := range defaultPools {
		resources = append(resources, "cdi.test/"+p)
	}
	for _, reg := range k.Registrations() {
		if !slices.Contains(resources, reg.ResourceName) {
			resources = append(resources, reg.ResourceName)
		}
	}
	named, injected := 0, 0
	for _, res := range resources {
		if resp := allocateOne(t, k, res); resp != nil {
			n, i := checkResolves(t, cache, res, resp.ContainerResponses[0])
			named, injected = named+n, injected+i
		}
	}
	if named == 0 {
		t.Fatal("no response named a device by CDI")
	}
	t.Logf("%d resources, %d CDI names resolved, %d of them injected (their nodes exist on this host)", len(resources), named, injected)
}

// startDefaultBridge runs cdi-bridge over conf.d's drop-ins, each with
// root at the fixture host and its state in the test.
func startDefaultBridge(t *testing.T, cdiDir string) *kubelettest.Kubelet {
	root, err := exectest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	confDir, state := t.TempDir(), exectest.StateDir(t)
	drops, _ := filepath.Glob(filepath.Join(root, "conf.d", "*", "*.conf"))
	for _, src := range drops {
		rel := filepath.Join(filepath.Base(filepath.Dir(src)), filepath.Base(src))
		data := exectest.Marshal(t, exectest.ShippedDropIn(t, rel, state))
		dst := filepath.Join(confDir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := kubelettest.NewHost(t)
	cmd := exec.Command(filepath.Join(binDir, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", binDir, "--node-name", "n1",
		"--device-plugin-dir", h.Dir, "--domain", "cdi.test", "--local-store", filepath.Join(t.TempDir(), "i.json"),
		"--metrics-address", "", "--pod-resources-socket", "", "--cdi-spec-dir", cdiDir)
	proctest.Start(t, cmd, "cdi-bridge", nil)
	return h.Kubelet
}

// allocateOne allocates the first healthy device resource offers; nil
// when it offers none (a slot that an earlier Allocate took).
func allocateOne(t *testing.T, k *kubelettest.Kubelet, resource string) *pluginapi.AllocateResponse {
	t.Helper()
	devs, err := k.WaitFor(resource, wait, func(_ int, d []*pluginapi.Device) bool { return d != nil })
	if err != nil {
		t.Fatalf("%s: %v", resource, err)
	}
	for _, d := range devs {
		if d.Health != pluginapi.Healthy {
			continue
		}
		resp, err := k.Allocate(context.Background(), resource, []string{d.ID})
		if err != nil {
			t.Fatalf("Allocate %s %s: %v", resource, d.ID, err)
		}
		return resp
	}
	return nil
}

// checkResolves checks one container's response against the library and
// returns how many CDI names it held and how many were injected.
func checkResolves(t *testing.T, cache *cdi.Cache, resource string, c *pluginapi.ContainerAllocateResponse) (named, injected int) {
	t.Helper()
	given := map[string]int{} // container path -> times given
	for _, d := range c.Devices {
		given[d.ContainerPath]++
	}
	for _, n := range c.CdiDevices {
		dev := cache.GetDevice(n.Name)
		if dev == nil {
			t.Errorf("%s: CDI name %s resolves to nothing in the bridge's spec files", resource, n.Name)
			continue
		}
		for _, node := range dev.ContainerEdits.DeviceNodes {
			given[node.Path]++
		}
		if onHost(dev) {
			inject(t, cache, n.Name)
			injected++
		}
	}
	for path, times := range given {
		if times != 1 {
			t.Errorf("%s: %s reaches the container %d times (CDI names %v, device specs %v)", resource, path, times, c.CdiDevices, c.Devices)
		}
	}
	if strings.HasPrefix(resource, "cdi.test/camera-") && len(c.CdiDevices) != 0 {
		t.Errorf("%s: a camera has no device node, yet is named by CDI: %v", resource, c.CdiDevices)
	}
	return len(c.CdiDevices), injected
}

// onHost says whether every host path of dev is a device node here.
func onHost(dev *cdi.Device) bool {
	for _, n := range dev.ContainerEdits.DeviceNodes {
		fi, err := os.Stat(n.HostPath)
		if err != nil || fi.Mode()&os.ModeDevice == 0 {
			return false
		}
	}
	return true
}

// inject applies name to an empty OCI spec as a runtime does, and checks
// that the device cgroup gets the plugin's permissions.
func inject(t *testing.T, cache *cdi.Cache, name string) {
	t.Helper()
	s := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(s, name); err != nil {
		t.Errorf("injecting %s: %v", name, err)
		return
	}
	for _, r := range s.Linux.Resources.Devices {
		if r.Access != "rw" {
			t.Errorf("%s: device cgroup access %q, want the plugin's rw", name, r.Access)
		}
	}
}

package node

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/deviceplugin/kubelettest"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/plugins/exectest"
)

const wait = 10 * time.Second

// startNode runs a Node for n1 over generic-tty serving tty41-tty44 with
// capacity 2, a local store and a kubelet-side fake over real sockets.
func startNode(t *testing.T) *kubelettest.Kubelet {
	root := exectest.FixtureRoot(t)
	confDir := t.TempDir()
	conf, _ := json.Marshal(map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": 40, "capacity": 2}})
	if err := os.MkdirAll(filepath.Join(confDir, "tty.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "tty.d", "generic.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	dpDir, err := os.MkdirTemp("", "node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dpDir) })
	k, err := kubelettest.Start(dpDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	n := New(Config{NodeName: "n1", Domain: "cdi.test", DevicePluginDir: dpDir,
		Store:       local.New(filepath.Join(t.TempDir(), "instances.json")),
		Discoverer:  &discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}},
		KubeletPoll: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return k
}

func listIDs(devs []*pluginapi.Device) string {
	var out []string
	for _, d := range devs {
		s := d.ID
		if d.Health != pluginapi.Healthy {
			s += "!"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func waitList(t *testing.T, k *kubelettest.Kubelet, res, want string) {
	t.Helper()
	if got, err := k.WaitFor(res, wait, func(_ int, d []*pluginapi.Device) bool { return listIDs(d) == want }); err != nil {
		t.Fatalf("%s: list %q, want %q: %v", res, listIDs(got), want, err)
	}
}

func TestNodeInstanceAndConfigurationLevel(t *testing.T) {
	k := startNode(t)
	const cl = "cdi.test/tty-generic"
	il := instance.Name("tty-generic", "tty41", "n1", false)
	// Four terminals with a free slot each: four placeholders.
	waitList(t, k, cl, "0,1,2,3")
	waitList(t, k, "cdi.test/"+il, il+"-0,"+il+"-1")

	resp, err := k.Allocate(context.Background(), "cdi.test/"+il, []string{il + "-0"})
	if err != nil || resp.ContainerResponses[0].Devices[0].HostPath != "/dev/tty41" {
		t.Fatalf("IL Allocate = %v, %v", resp, err)
	}
	// Slot 0 is this node's IL claim (still healthy to the IL plugin);
	// tty41 keeps a free slot, so the CL offer is unchanged.
	waitList(t, k, "cdi.test/"+il, il+"-0,"+il+"-1")
	waitList(t, k, cl, "0,1,2,3")

	resp, err = k.Allocate(context.Background(), cl, []string{"0", "1"}, []string{"2"})
	if err != nil || len(resp.ContainerResponses) != 2 {
		t.Fatalf("CL Allocate = %v, %v", resp, err)
	}
	first := resp.ContainerResponses[0]
	if len(first.Devices) != 2 || first.Devices[0].HostPath == first.Devices[1].HostPath {
		t.Errorf("one container got the same terminal twice: %v", first.Devices)
	}
	// The claimed vdevs stay, and every terminal still has a free slot.
	waitList(t, k, cl, "0,1,2,3,4,5,6")
	if _, err := k.Allocate(context.Background(), cl, []string{"3", "4", "5", "6", "7"}); err == nil {
		t.Error("a container request for five distinct terminals out of four was granted")
	}
}

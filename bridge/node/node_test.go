package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

const wait = 10 * time.Second

// startNode runs a Node for n1 over generic-tty serving tty41-tty44 with
// capacity 2, a local store and a kubelet-side fake over real sockets,
// and a discovery that hands it every pool; opts may change the Config
// and the Discoverer.
func startNode(t *testing.T, opts ...func(*Config, *discovery.Discoverer)) *kubelettest.Kubelet {
	k, _ := startNodeWith(t, "tty.d/generic.conf", ttyDropIn(t), opts...)
	return k
}

// ttyDropIn serves tty41-tty44 of the fixture with capacity 2.
func ttyDropIn(t *testing.T) map[string]any {
	return map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reserved": 40, "capacity": 2}}
}

// startNodeWith is startNode over one drop-in, doc, at path under the
// drop-in directory; it returns the Node too.
func startNodeWith(t *testing.T, path string, doc map[string]any, opts ...func(*Config, *discovery.Discoverer)) (*kubelettest.Kubelet, *Node) {
	confDir := t.TempDir()
	conf, _ := json.Marshal(doc)
	if err := os.MkdirAll(filepath.Join(confDir, filepath.Dir(path)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, path), conf, 0o644); err != nil {
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
	cfg := Config{NodeName: "n1", Domain: "cdi.test", DevicePluginDir: dpDir,
		Store: local.New(filepath.Join(t.TempDir(), "instances.json")), KubeletPoll: 50 * time.Millisecond}
	disc := &discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}}
	for _, o := range opts {
		o(&cfg, disc)
	}
	n := New(cfg)
	disc.Keep = n.Holds
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = n.Run(ctx) }()
	go func() {
		defer wg.Done()
		disc.Run(ctx, time.Minute, time.Second, func(u discovery.Update) { n.Publish(ctx, u) })
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return k, n
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

// The kubelet asks the Configuration-level plugin for a preference over
// real gRPC; the answer keeps to distinct terminals, so the Allocate that
// follows is granted where the kubelet's own pick could be denied.
func TestNodePreferredAllocation(t *testing.T) {
	k := startNode(t)
	const cl = "cdi.test/tty-generic"
	name := instance.Name("tty-generic", "tty41", "n1", false)
	il := "cdi.test/" + name
	waitList(t, k, cl, "0,1,2,3")
	waitList(t, k, il, name+"-0,"+name+"-1")
	ctx := context.Background()
	// One slot of each terminal, then vdev 4 on the same terminal as 0:
	// every terminal takes one slot before any takes a second.
	if _, err := k.Allocate(ctx, cl, []string{"0"}, []string{"1"}, []string{"2"}, []string{"3"}); err != nil {
		t.Fatal(err)
	}
	waitList(t, k, cl, "0,1,2,3,4,5,6,7")
	if _, err := k.Allocate(ctx, cl, []string{"4"}); err != nil {
		t.Fatal(err)
	}
	waitList(t, k, cl, "0,1,2,3,4,5,6,7")
	all := []string{"0", "1", "2", "3", "4", "5", "6", "7"}

	got, err := k.PreferredAllocation(ctx, cl, all, []string{"4"}, 3)
	if err != nil || strings.Join(got, ",") != "4,1,2" {
		t.Fatalf("PreferredAllocation = %v, %v; want 4,1,2 (0 shares 4's terminal)", got, err)
	}
	resp, err := k.Allocate(ctx, cl, got)
	if err != nil {
		t.Fatalf("Allocate of the preference %v: %v", got, err)
	}
	if paths := hostPaths(resp.ContainerResponses[0]); len(paths) != 3 {
		t.Errorf("the preference %v got terminals %v, want three distinct", got, paths)
	}
	if _, err := k.Allocate(ctx, cl, []string{"4", "0"}); err == nil {
		t.Error("vdevs 4 and 0, one terminal, were granted to one container")
	}
	if _, err := k.PreferredAllocation(ctx, il, []string{"x"}, nil, 1); !errors.Is(err, kubelettest.ErrNotAdvertised) {
		t.Errorf("Instance-level PreferredAllocation = %v, want ErrNotAdvertised", err)
	}
}

func hostPaths(c *pluginapi.ContainerAllocateResponse) map[string]bool {
	out := map[string]bool{}
	for _, d := range c.Devices {
		out[d.HostPath] = true
	}
	return out
}

// Every Allocate call's outcome reaches OnAllocate: granted, denied by
// the rules before any claim, and failed at the claim (an Instance-level
// request for the slot the Configuration-level plugin just took).
func TestNodeReportsAllocations(t *testing.T) {
	var mu sync.Mutex
	var got []string
	k := startNode(t, func(c *Config, _ *discovery.Discoverer) {
		c.OnAllocate = func(resource, level, result string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, resource+" "+level+" "+result)
		}
	})
	const cl = "cdi.test/tty-generic"
	waitList(t, k, cl, "0,1,2,3")
	ctx := context.Background()
	resp, err := k.Allocate(ctx, cl, []string{"0"})
	if err != nil {
		t.Fatal(err)
	}
	var slot string
	for key := range resp.ContainerResponses[0].Annotations {
		if s, ok := strings.CutPrefix(key, SlotAnnotation("cdi.test", "")); ok {
			slot = s
		}
	}
	name := strings.TrimSuffix(slot, "-0")
	il := "cdi.test/" + name
	waitList(t, k, il, name+"-0!,"+name+"-1")
	if _, err := k.Allocate(ctx, cl, []string{"1", "2", "3", "4", "5"}); err == nil {
		t.Error("five distinct terminals out of four were granted")
	}
	if _, err := k.Allocate(ctx, il, []string{slot}); err == nil {
		t.Errorf("the Instance-level plugin granted %s, which the Configuration-level one holds", slot)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{cl + " configuration ok", cl + " configuration denied", il + " instance failed"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("OnAllocate heard %q, want %q", got, want)
	}
}

// Every camera a container is given reaches it, whether the kubelet asks
// for two or three of the pool (Configuration level) or for two slots of
// one camera (Instance level): the bridge runs one ADD per slot, and the
// values are joined as one ADD of several cameras joins them. Before,
// the container saw one camera's values, picked at random.
func TestNodeJoinsEveryDevicesEnv(t *testing.T) {
	cameras := []map[string]any{}
	for _, id := range []string{"a", "b", "c"} {
		cameras = append(cameras, map[string]any{"id": id, "url": "rtsp://192.0.2.1/" + id})
	}
	k, _ := startNodeWith(t, "camera.d/endpoint.conf", map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "camera", "plugin": "endpoint",
		"args": map[string]any{"stateDir": t.TempDir(), "capacity": 4, "envPrefix": "CAMERA", "endpoints": cameras}})
	const cl = "cdi.test/camera-endpoint"
	waitList(t, k, cl, "0,1,2")
	envOf := func(resource string, ids ...string) map[string]string {
		t.Helper()
		resp, err := k.Allocate(context.Background(), resource, ids)
		if err != nil {
			t.Fatalf("Allocate %s %v: %v", resource, ids, err)
		}
		return resp.ContainerResponses[0].Envs
	}
	for _, tc := range []struct {
		ids  []string
		want int
	}{{[]string{"0", "1"}, 2}, {[]string{"3", "4", "5"}, 3}} {
		env := envOf(cl, tc.ids...)
		if urls := strings.Split(env["CAMERA_URL"], ","); len(urls) != tc.want || len(strings.Split(env["CAMERA_ID"], ",")) != tc.want {
			t.Errorf("%d cameras: CAMERA_URL %q, CAMERA_ID %q; want %d of each", tc.want, env["CAMERA_URL"], env["CAMERA_ID"], tc.want)
		}
	}
	// Instance level: two slots of camera c in one container.
	ilc := "cdi.test/" + instance.Name("camera-endpoint", "c", "n1", true)
	devs, err := k.WaitFor(ilc, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 4 })
	if err != nil {
		t.Fatal(err)
	}
	var free []string
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			free = append(free, d.ID)
		}
	}
	if len(free) < 2 {
		t.Fatalf("camera c has free slots %v, want two", free)
	}
	if env := envOf(ilc, free[:2]...); env["CAMERA_URL"] != "rtsp://192.0.2.1/c" || env["CAMERA_ID"] != "c" {
		t.Errorf("Instance level, two slots of c: CAMERA_URL %q, CAMERA_ID %q; want camera c's, once", env["CAMERA_URL"], env["CAMERA_ID"])
	}
}

// The node is ready only while every device plugin is registered with the
// kubelet: /readyz said ok while every registration was failing.
func TestReadinessNeedsRegistrations(t *testing.T) {
	k, n := startNodeWith(t, "tty.d/generic.conf", ttyDropIn(t))
	waitReadiness(t, n, "")
	k.Stop() // the kubelet is gone
	waitReadiness(t, n, "not registered with the kubelet")
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	waitReadiness(t, n, "")
}

// waitReadiness waits until n.Readiness is nil (want "") or says want.
func waitReadiness(t *testing.T, n *Node, want string) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = n.Readiness(); (want == "" && err == nil) || (want != "" && err != nil && strings.Contains(err.Error(), want)) {
			return
		}
	}
	t.Fatalf("Readiness = %v, want %q", err, want)
}

// A pool of more devices than MaxInstanceLevel is offered at the
// Configuration level only; one within it gets a resource per device too.
func TestMaxInstanceLevel(t *testing.T) {
	for _, tc := range []struct {
		limit, resources int
	}{{limit: 3, resources: 1}, {limit: 4, resources: 5}, {limit: 0, resources: 5}} {
		t.Run(fmt.Sprintf("limit %d", tc.limit), func(t *testing.T) {
			k, n := startNodeWith(t, "tty.d/generic.conf", ttyDropIn(t), func(c *Config, _ *discovery.Discoverer) { c.MaxInstanceLevel = tc.limit })
			waitList(t, k, "cdi.test/tty-generic", "0,1,2,3")
			// Ready: every resource the node serves is registered.
			deadline := time.Now().Add(wait)
			for err := n.Readiness(); err != nil; err = n.Readiness() {
				if time.Now().After(deadline) {
					t.Fatal(err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			var got []string
			for _, r := range k.Registrations() {
				got = append(got, r.ResourceName)
			}
			if len(got) != tc.resources {
				t.Errorf("registered %v, want %d resources for four terminals", got, tc.resources)
			}
			if _, err := k.Allocate(context.Background(), "cdi.test/tty-generic", []string{"0"}); err != nil {
				t.Errorf("the pool's resource: %v", err)
			}
		})
	}
}

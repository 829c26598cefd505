package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// clusterNode is one node of TestCluster: a cdi-bridge process with the
// Kubernetes store, its own kubelet-side fake, device-plugin dir,
// PodResources server and plugin state.
type clusterNode struct {
	name    string
	kubelet *kubelettest.Kubelet
	pods    *kubelettest.PodResources
	// args are the bridge's flags; cmd its process, once started.
	args []string
	cmd  *exec.Cmd
}

// The shared camera every node sees, and its resources.
const (
	camPool = "cdi.test/camera-endpoint"
	camID   = "gate"
)

func camInstance() string { return instance.Name("camera-endpoint", camID, "", true) }

// startClusterNode runs a bridge for node name against the API server of
// kubeconfig, Instances in namespace, serving the shared camera camID of
// capacity 2. Its reclaim runs every 25 ms with no grace, so that a slot
// its PodResources stops listing is released at once.
func startClusterNode(t *testing.T, name, kubeconfig, namespace string) *clusterNode {
	return startCameraNode(t, name, kubeconfig, namespace, 2, camID)
}

// startCameraNode is startClusterNode with shared cameras ids of
// capacity each.
func startCameraNode(t *testing.T, name, kubeconfig, namespace string, capacity int, ids ...string) *clusterNode {
	n := newCameraNode(t, name, kubeconfig, namespace, capacity, ids...)
	n.start(t, filepath.Join(binDir, "cdi-bridge"))
	return n
}

// newCameraNode is startCameraNode's node, not started.
func newCameraNode(t *testing.T, name, kubeconfig, namespace string, capacity int, ids ...string) *clusterNode {
	confDir := t.TempDir()
	var cams []map[string]any
	for _, id := range ids {
		cams = append(cams, map[string]any{"id": id, "url": "rtsp://192.0.2.1/" + id})
	}
	conf, _ := json.Marshal(map[string]any{"cdiVersion": "0.1.0", "name": "cameras", "type": "camera", "plugin": "endpoint",
		"args": map[string]any{"stateDir": exectest.StateDir(t), "capacity": capacity, "endpoints": cams}})
	_ = os.MkdirAll(filepath.Join(confDir, "camera.d"), 0o755)
	if err := os.WriteFile(filepath.Join(confDir, "camera.d", "endpoint.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	h := kubelettest.NewHost(t)
	args := []string{"--conf-dir", confDir, "--plugin-path", binDir,
		"--node-name", name, "--device-plugin-dir", h.Dir, "--domain", "cdi.test", "--metrics-address", "",
		"--cdi-spec-dir", t.TempDir(),
		"--store", "kube", "--kubeconfig", kubeconfig, "--namespace", namespace,
		"--pod-resources-socket", h.PodResourcesSocket, "--reclaim-grace", "0s", "--reclaim-period", "25ms", "--log-level", "warn"}
	return &clusterNode{name: name, kubelet: h.Kubelet, pods: h.Pods, args: args}
}

// start runs the node's bridge from binary. Every lost race is a
// warning: the logs go to a file, shown when the test fails.
func (n *clusterNode) start(t *testing.T, binary string) {
	t.Helper()
	n.cmd = exec.Command(binary, n.args...)
	proctest.Start(t, n.cmd, fmt.Sprintf("node %s (%s)", n.name, filepath.Base(binary)), nil)
}

// stop ends the node's bridge as its pod's deletion does, with SIGTERM,
// and waits until it has exited.
func (n *clusterNode) stop(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("node %s's bridge on SIGTERM: %v", n.name, err)
		}
	case <-time.After(wait):
		t.Fatalf("node %s's bridge still running %v after SIGTERM", n.name, wait)
	}
}

// everything is what a node's containers hold until a test says
// otherwise: every slot of the camera at either level.
func everything(il string) map[string][]string {
	return map[string][]string{il: {instance.SlotID(camInstance(), 0), instance.SlotID(camInstance(), 1)}, camPool: {"0", "1"}}
}

// health is a list's health by device id.
func health(devs []*pluginapi.Device) map[string]string {
	out := map[string]string{}
	for _, d := range devs {
		out[d.ID] = d.Health
	}
	return out
}

// waitHealth waits until n's kubelet lists resource with exactly want.
func (n *clusterNode) waitHealth(t *testing.T, resource string, want map[string]string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := n.kubelet.WaitFor(resource, timeout, func(_ int, devs []*pluginapi.Device) bool {
		return devs != nil && fmt.Sprint(health(devs)) == fmt.Sprint(want)
	})
	if err != nil {
		t.Fatalf("node %s: %v; want %v", n.name, err, want)
	}
	return time.Since(start)
}

// TestCluster runs three bridges as three nodes against one real API
// server, sharing a camera of capacity 2: claims from every node, at both
// levels, respect its capacity cluster-wide; a release on one node is seen
// on the others; and when all race for the last slot, one wins and the
// others' kubelets see it taken within a second.
func TestCluster(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	kubeconfig, ns := env.Kubeconfig(t, apitest.AdminUser), env.Namespace(t)
	var nodes []*clusterNode
	for _, name := range []string{"n1", "n2", "n3"} {
		nodes = append(nodes, startClusterNode(t, name, kubeconfig, ns))
	}
	il := "cdi.test/" + camInstance()
	s0, s1 := instance.SlotID(camInstance(), 0), instance.SlotID(camInstance(), 1)
	for _, n := range nodes {
		n.waitHealth(t, il, map[string]string{s0: pluginapi.Healthy, s1: pluginapi.Healthy}, wait)
		n.waitHealth(t, camPool, map[string]string{"0": pluginapi.Healthy}, wait)
		// Until told otherwise, every container keeps what it got.
		n.pods.Set(everything(il))
	}
	ctx := t.Context()
	// n1 takes slot 0 at the Instance level, n2 the other slot through
	// the pool: the camera is full everywhere.
	if _, err := nodes[0].kubelet.Allocate(ctx, il, []string{s0}); err != nil {
		t.Fatal(err)
	}
	nodes[1].waitHealth(t, camPool, map[string]string{"0": pluginapi.Healthy}, wait)
	if _, err := nodes[1].kubelet.Allocate(ctx, camPool, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	full := map[string]string{s0: pluginapi.Unhealthy, s1: pluginapi.Unhealthy}
	nodes[2].waitHealth(t, il, full, wait)
	nodes[2].waitHealth(t, camPool, map[string]string{}, wait)
	for _, slot := range []string{s0, s1} {
		if _, err := nodes[2].kubelet.Allocate(ctx, il, []string{slot}); err == nil {
			t.Fatalf("n3 got %s of a full camera", slot)
		}
	}
	if _, err := nodes[2].kubelet.Allocate(ctx, camPool, []string{"0"}); err == nil {
		t.Fatal("n3's pool granted a vdev of a full camera")
	}
	// n1's container ends: its slot comes back, and n3 sees it.
	nodes[0].pods.Set(map[string][]string{})
	took := nodes[2].waitHealth(t, il, map[string]string{s0: pluginapi.Healthy, s1: pluginapi.Unhealthy}, wait)
	t.Logf("n1's release reached n3's kubelet after %v", took)
	nodes[0].pods.Set(everything(il))
	raceForSlot(t, nodes, il, s0, s1)
}

// raceForSlot: all nodes ask for slot at once (the camera's other slot
// held elsewhere), rounds times. Exactly one is granted; every loser's
// kubelet lists the slot Unhealthy within a second. The winner's
// container then ends, and the next round waits until the slot is free
// everywhere.
func raceForSlot(t *testing.T, nodes []*clusterNode, il, slot, other string) {
	const rounds = 200
	free := map[string]string{slot: pluginapi.Healthy, other: pluginapi.Unhealthy}
	taken := map[string]string{slot: pluginapi.Unhealthy, other: pluginapi.Unhealthy}
	var slowest time.Duration
	wins := map[string]int{}
	start := time.Now()
	for round := range rounds {
		for _, n := range nodes {
			n.waitHealth(t, il, free, wait)
		}
		winner := allocateAtOnce(t, nodes, il, slot)
		if winner == nil {
			t.Fatalf("round %d: not exactly one winner", round)
		}
		wins[winner.name]++
		for _, n := range nodes {
			if n != winner {
				slowest = max(slowest, n.waitHealth(t, il, taken, time.Second))
			}
		}
		winner.pods.Set(map[string][]string{camPool: {"0", "1"}}) // the container with the slot ends
		for _, n := range nodes {
			n.waitHealth(t, il, free, wait)
		}
		winner.pods.Set(everything(il))
	}
	t.Logf("%d rounds in %v: wins %v; the losers' kubelets saw the slot taken within %v at the slowest",
		rounds, time.Since(start).Round(time.Millisecond), wins, slowest)
}

// allocateAtOnce has every node's kubelet Allocate slot at the same
// instant and returns the only node granted it, or nil.
func allocateAtOnce(t *testing.T, nodes []*clusterNode, il, slot string) *clusterNode {
	t.Helper()
	errs := atOnce(nodes, il, slot)
	var winners []*clusterNode
	for i, err := range errs {
		if err == nil {
			winners = append(winners, nodes[i])
		}
	}
	if len(winners) != 1 {
		t.Errorf("winners %d, errors %v", len(winners), errors.Join(errs...))
		return nil
	}
	return winners[0]
}

// TestPoolRace: three nodes ask the camera pool for one camera each at
// the same instant while three cameras are free. Every node must be
// granted in every round. Before, every node chose the device with the
// most free slots, ties going to the first name, and a node that lost the
// race for it was refused while other cameras were free (7 of 20 rounds
// granted everyone).
func TestPoolRace(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	kubeconfig, ns := env.Kubeconfig(t, apitest.AdminUser), env.Namespace(t)
	free := map[string]string{"0": pluginapi.Healthy, "1": pluginapi.Healthy, "2": pluginapi.Healthy}
	hold := map[string][]string{camPool: {"0"}}
	var nodes []*clusterNode
	for _, name := range []string{"n1", "n2", "n3"} {
		n := startCameraNode(t, name, kubeconfig, ns, 1, "a", "b", "c")
		n.waitHealth(t, camPool, free, wait)
		n.pods.Set(hold)
		nodes = append(nodes, n)
	}
	const rounds = 50
	allGranted := 0
	start := time.Now()
	for round := range rounds {
		errs := atOnce(nodes, camPool, "0")
		if err := errors.Join(errs...); err != nil {
			t.Errorf("round %d: refused while a camera was free: %v", round, err)
		} else {
			allGranted++
		}
		for _, n := range nodes { // every container ends: reclaim frees the slots
			n.pods.Set(map[string][]string{})
		}
		// A node lists its own claim as a healthy vdev, so its list looks
		// free before its reclaim has run; only the other nodes' lists
		// show that it has. Holding again before every node sees all
		// three free would keep a claim that was not yet released.
		for _, n := range nodes {
			n.waitHealth(t, camPool, free, wait)
		}
		for _, n := range nodes {
			n.pods.Set(hold)
		}
	}
	t.Logf("%d of %d rounds granted all three nodes, in %v", allGranted, rounds, time.Since(start).Round(time.Millisecond))
}

// atOnce has every node's kubelet Allocate id of resource at the same
// instant, and returns each node's error.
func atOnce(nodes []*clusterNode, resource, id string) []error {
	errs := make([]error, len(nodes))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			<-gate
			_, errs[i] = n.kubelet.Allocate(context.Background(), resource, []string{id})
		})
	}
	close(gate)
	wg.Wait()
	return errs
}

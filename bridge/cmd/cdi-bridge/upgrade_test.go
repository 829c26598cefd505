package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// previousRelease is the last commit whose bridge recorded the nodes that
// see a device in its Instance (spec.nodes), before the Presences and
// the pool labels.
const previousRelease = "caba71966fdf9be18e0474400b3b445b5f2a964d"

// buildBridgeAt builds cdi-bridge as it was at commit, from the
// repository's history (git archive), and returns the binary's path.
// Without git or a repository it skips, unless the tests must run all; in
// a shallow clone, which lacks the history, it skips.
func buildBridgeAt(t *testing.T, commit string) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		if apitest.MustRun() {
			t.Fatalf("the bridge of commit %s cannot be built without git and the repository: %v", commit, err)
		}
		t.Skipf("no git or no repository here: %v", err)
	}
	if err := exec.Command("git", "-C", strings.TrimSpace(string(top)), "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		shallow, _ := exec.Command("git", "-C", strings.TrimSpace(string(top)), "rev-parse", "--is-shallow-repository").Output()
		if strings.TrimSpace(string(shallow)) == "true" {
			t.Skipf("a shallow clone, without commit %s", commit)
		}
		t.Fatalf("commit %s is not in the repository's history: %v", commit, err)
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", strings.TrimSpace(string(top)), "archive", "--format=tar", commit)
	extract := exec.Command("tar", "-x", "-C", src)
	var tarErr bytes.Buffer
	extract.Stdin, _ = archive.StdoutPipe()
	extract.Stderr = &tarErr
	if err := extract.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	if err := extract.Wait(); err != nil {
		t.Fatalf("extracting commit %s: %v: %s", commit, err, tarErr.String())
	}
	out := filepath.Join(t.TempDir(), "cdi-bridge-"+commit[:7])
	build := exec.Command("go", "build", "-o", out, "./bridge/cmd/cdi-bridge")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the bridge of commit %s: %v\n%s", commit, err, msg)
	}
	return out
}

// TestUpgradeFromPreviousRelease rolls three nodes sharing a camera of
// capacity 2 from the previous release's bridge to this one, one node at
// a time, against one API server with this release's CRDs applied first
// (as the README says). While old and new bridges run side by side, the
// camera's capacity holds cluster-wide at both levels and every node
// sees the device; a claim made by an old bridge survives its node's
// upgrade; once all are new, the Instance carries its pool label and no
// node names in spec.nodes, and a slot freed reaches another node.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping with -short: builds the previous release and starts a kube-apiserver")
	}
	old := buildBridgeAt(t, previousRelease)
	current := filepath.Join(binDir, "cdi-bridge")
	env := apitest.StartWithInstances(t, apitest.Options{})
	kubeconfig, ns := env.Kubeconfig(t, apitest.AdminUser), env.Namespace(t)
	nodes := make([]*clusterNode, 3)
	for i, name := range []string{"n1", "n2", "n3"} {
		nodes[i] = newCameraNode(t, name, kubeconfig, ns, 2, camID)
		nodes[i].start(t, map[bool]string{true: current, false: old}[name == "n3"])
	}
	il := "cdi.test/" + camInstance()
	s0, s1 := instance.SlotID(camInstance(), 0), instance.SlotID(camInstance(), 1)
	for _, n := range nodes {
		n.waitHealth(t, il, map[string]string{s0: pluginapi.Healthy, s1: pluginapi.Healthy}, wait)
		n.pods.Set(everything(il))
	}
	ctx := t.Context()
	// Old n1 takes slot 0 at the Instance level, new n3 the other through
	// the pool; old n2 gets nothing.
	if _, err := nodes[0].kubelet.Allocate(ctx, il, []string{s0}); err != nil {
		t.Fatal(err)
	}
	// The old bridge's write dropped the Instance's pool label: the new
	// one still sees the device, and the claim.
	nodes[2].waitHealth(t, il, map[string]string{s0: pluginapi.Unhealthy, s1: pluginapi.Healthy}, wait)
	nodes[2].waitHealth(t, camPool, map[string]string{"0": pluginapi.Healthy}, wait)
	if _, err := nodes[2].kubelet.Allocate(ctx, camPool, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	refused(t, nodes[1], il, s0, s1)
	for _, n := range nodes {
		t.Logf("upgrading %s", n.name)
		n.stop(t)
		n.start(t, current)
		// n2, which holds nothing, is refused whichever bridges run; the
		// holders' own lists show their slots as theirs.
		refused(t, nodes[1], il, s0, s1)
	}
	waitMigrated(t, env, ns)
	// n1's container ends: its slot, claimed by the old bridge, comes
	// back, and n2 gets it.
	nodes[0].pods.Set(map[string][]string{})
	nodes[1].waitHealth(t, il, map[string]string{s0: pluginapi.Healthy, s1: pluginapi.Unhealthy}, wait)
	if _, err := nodes[1].kubelet.Allocate(ctx, il, []string{s0}); err != nil {
		t.Fatalf("n2 after n1's release: %v", err)
	}
}

// refused checks that n's kubelet is refused every slot of the full
// camera, at both levels.
func refused(t *testing.T, n *clusterNode, il string, slots ...string) {
	t.Helper()
	n.waitHealth(t, il, map[string]string{slots[0]: pluginapi.Unhealthy, slots[1]: pluginapi.Unhealthy}, wait)
	for _, slot := range slots {
		if _, err := n.kubelet.Allocate(t.Context(), il, []string{slot}); err == nil {
			t.Fatalf("%s got %s of a full camera", n.name, slot)
		}
	}
	if _, err := n.kubelet.Allocate(t.Context(), camPool, []string{"0"}); err == nil {
		t.Fatalf("%s's pool granted a vdev of a full camera", n.name)
	}
}

// waitMigrated waits until the camera's Instance, with every bridge of
// this release, carries its pool label and names no node in spec.nodes,
// and each node has its Presence.
func waitMigrated(t *testing.T, env *apitest.Env, ns string) {
	t.Helper()
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	var labels map[string]string
	var presences int
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		obj, err := client.Resource(kube.Resource).Namespace(ns).Get(t.Context(), camInstance(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes, _, _ = unstructured.NestedStringSlice(obj.Object, "spec", "nodes")
		labels = obj.GetLabels()
		list, err := client.Resource(kube.PresenceResource).Namespace(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		presences = len(list.Items)
		if len(nodes) == 0 && labels[kube.LabelPool] != "" && presences == 3 {
			return
		}
	}
	t.Fatalf("after the upgrade: spec.nodes %v, labels %v, %d Presences; want none, the pool's, 3", slices.Clip(nodes), labels, presences)
}

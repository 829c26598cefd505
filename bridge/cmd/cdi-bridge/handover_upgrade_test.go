package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
)

// A pool moved from device plugins to DRA across the hand-over (the old
// pod serves tty-generic through its device plugins, the new one has
// --dra-pools=tty-generic) with a running device-plugin pod: the old
// bridge granted a slot whose Allocate answer names the device by CDI
// (cdi.test/tty-generic=...), and the kubelet's PodResources says the
// container holds it. While the old bridge holds the node lock the CDI
// spec file stays (TestHandOver checks that much), but at the take-over
// the new bridge splits by its own pools and its device plugins' CDI
// Sync no longer writes the pool's spec file; the DRA front end keeps it
// while it keeps the slot (withheld from the slices) because a container
// holds it. The kubelet hands the cached Allocate answer to the runtime
// at every restart of that container: without the file the runtime
// would fail it on the name it could no longer resolve.
func TestHandOverKeepsRunningPodsCDISpec(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const resource = "cdi.test/tty-generic"
	n := newSurgeNode(t, env, client, "adv-cdi")
	specFile := filepath.Join(n.cdiDir, cdispec.FileName(cdispec.Kind{Vendor: "cdi.test", Class: "tty-generic"}))
	old := n.start(t, "old-pod", "")
	if _, err := n.host.Kubelet.WaitFor(resource, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
	resp, err := n.host.Kubelet.Allocate(context.Background(), resource, []string{"0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 1 || len(resp.ContainerResponses[0].CdiDevices) != 1 {
		t.Fatalf("the old bridge's Allocate answer %v, want one CDI name", resp)
	}
	cdiName := resp.ContainerResponses[0].CdiDevices[0].Name
	// The container runs, holding the slot.
	n.host.Pods.Set(map[string][]string{resource: {"0"}})

	next := n.start(t, "new-pod", "tty-generic")
	n.registerDRA(t, "new-pod")
	next.waitReady(t)
	old.stop(t)
	for deadline := time.Now().Add(wait); len(next.log.records("took over the node from the bridge that held its lock: this bridge writes the node's ResourceSlices, its own --dra-pools split the pools")) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the new bridge never took over")
		}
	}
	// The slot is kept by the DRA front end (a container holds it): its
	// device is left out of the slices. Wait for the slices to be written.
	if got := waitSliceDevices(t, client, "adv-cdi/tty-generic", 1); got != 1 {
		t.Errorf("after the take-over the pool's slices offer %d devices, want 1: the running container's device is offered to DRA too", got)
	}
	during(t, 3*time.Second, func() string {
		if _, err := os.Stat(specFile); err != nil {
			return "after the take-over, the CDI spec file naming " + cdiName +
				", which the running device-plugin container's cached Allocate answer names, is gone: " + err.Error()
		}
		return ""
	})
}

// preHandOverRelease is the bridge before the node lock and the rebuild
// from the kubelet's pods: the release whose pods a rolling update to
// this one replaces.
const preHandOverRelease = "a376f52bcb9cadaf990236b4e1376db3550c8477"

// An old pod of the rolling update (the release before this one)
// restarted while the update runs (a crash, the OOM killer, a liveness
// kill, its node rebooted) registers its DRA driver under this release's
// DRA ClusterRole, which the chart put in place at the start of the
// update: it keeps list on ResourceClaims, which the old release's
// rebuild of the prepared claims needs. Without it, the old bridge would
// retry its rebuild for ever, and no claim would be prepared on that
// node until the update reached it, which with maxSurge 1 may be hours.
func TestPreviousReleaseRestartedUnderThisRBAC(t *testing.T) {
	oldBin := buildBridgeAt(t, preHandOverRelease)
	env := apitest.Start(t, apitest.Options{Users: []apitest.User{{Name: "bridge"}}})
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	schedtest.BindDRARole(t, client, "bridge") // this release's rbac.yaml
	n := newSurgeNode(t, env, client, "old-restarted")
	n.kubeconfig = env.Kubeconfig(t, "bridge")
	log := &logWatcher{addr: make(chan string, 1)}
	cmd := exec.Command(oldBin, "--conf-dir", n.confDir, "--plugin-path", binDir, "--node-name", n.name,
		"--device-plugin-dir", n.host.Dir, "--pod-resources-socket", n.host.PodResourcesSocket, "--domain", "cdi.test",
		"--metrics-address", "", "--cdi-spec-dir", n.cdiDir, "--store", "local",
		"--local-store", filepath.Join(t.TempDir(), "i.json"), "--kubeconfig", n.kubeconfig, "--dra-pools", "tty-generic",
		"--dra-checkpoint", n.checkpoint, "--dra-plugin-dir", filepath.Join(n.draDir, "plugin"), "--dra-registrar-dir", n.regDir,
		"--pod-uid", "old-pod")
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sock := filepath.Join(n.regDir, "cdi.test-old-pod-reg.sock")
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return
		}
		if time.Now().After(deadline) {
			var said string
			for _, l := range log.rawLines() {
				if strings.Contains(string(l), "cannot rebuild") {
					said = string(l)
				}
			}
			t.Fatalf("the old release's bridge, restarted under this release's DRA ClusterRole, never registered its DRA driver "+
				"in %v; it logs: %s", wait, said)
		}
	}
}

package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/internal/handover"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// surgeNode is one node's host for two cdi-bridge processes side by
// side, as the old and the new pod of a DaemonSet update with maxSurge:
// one kubelet, one CDI spec directory, one DRA plugin directory and
// checkpoint, one --node-lock.
type surgeNode struct {
	name, kubeconfig, confDir, cdiDir, draDir, regDir, checkpoint, lock string
	host                                                                *kubelettest.Host
}

func newSurgeNode(t *testing.T, env *apitest.Env, client kubernetes.Interface, name string) *surgeNode {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := &surgeNode{name: name, kubeconfig: env.Kubeconfig(t, apitest.AdminUser), confDir: t.TempDir(), cdiDir: t.TempDir(),
		draDir: kubelettest.SocketDir(t, "dra"), checkpoint: filepath.Join(t.TempDir(), "claims.json"),
		lock: filepath.Join(t.TempDir(), "bridge", "node.lock"), host: kubelettest.NewHost(t)}
	n.regDir = filepath.Join(n.draDir, "registry")
	if err := os.Mkdir(n.regDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeDropIn(t, n.confDir, "tty.d/generic.conf", map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": exectest.FixtureRoot(t), "stateDir": exectest.StateDir(t), "num_system_reserved": 42}})
	return n
}

// surgePod is one cdi-bridge process of a surgeNode.
type surgePod struct {
	cmd  *exec.Cmd
	log  *logWatcher
	addr string // --metrics-address as bound
}

// start runs cdi-bridge as pod uid of n, with --dra-pools draPools.
func (n *surgeNode) start(t *testing.T, uid, draPools string) *surgePod {
	t.Helper()
	addr := make(chan string, 1)
	p := &surgePod{log: &logWatcher{addr: addr}}
	p.cmd = exec.Command(filepath.Join(binDir, "cdi-bridge"), "--conf-dir", n.confDir, "--plugin-path", binDir, "--node-name", n.name,
		"--device-plugin-dir", n.host.Dir, "--pod-resources-socket", n.host.PodResourcesSocket, "--domain", "cdi.test",
		"--metrics-address", "127.0.0.1:0", "--cdi-spec-dir", n.cdiDir, "--store", "local",
		"--local-store", filepath.Join(t.TempDir(), "i.json"), "--kubeconfig", n.kubeconfig, "--dra-pools", draPools,
		"--dra-checkpoint", n.checkpoint, "--dra-plugin-dir", filepath.Join(n.draDir, "plugin"), "--dra-registrar-dir", n.regDir,
		"--pod-uid", uid, "--node-lock", n.lock)
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	select {
	case p.addr = <-addr:
	case <-time.After(wait):
		t.Fatal("the bridge never logged its metrics address")
	}
	return p
}

// stop stops the pod's bridge as the kubelet does, and waits for it.
func (p *surgePod) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// waitReady waits until the bridge's /readyz answers 200.
func (p *surgePod) waitReady(t *testing.T) {
	t.Helper()
	var body string
	err := kwait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, wait, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("/readyz: %s", body)
	}
}

// registered is how many times the bridge registered resource with the
// kubelet.
func (p *surgePod) registered(t *testing.T, resource string) float64 {
	return series{"cdi_bridge_registrations_total", map[string]string{"resource": resource, "result": "ok"}}.value(scrape(t, p.addr))
}

// registerDRA plays the kubelet's plugin registration of pod uid's DRA
// driver, which the bridge's readiness waits for.
func (n *surgeNode) registerDRA(t *testing.T, uid string) {
	t.Helper()
	sock := filepath.Join(n.regDir, "cdi.test-"+uid+"-reg.sock")
	for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no DRA registration socket %s", sock)
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kubelet := registerapi.NewRegistrationClient(conn)
	if _, err := kubelet.GetInfo(t.Context(), &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubelet.NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
}

// during checks ok every 100 ms for d.
func during(t *testing.T, d time.Duration, ok func() string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if msg := ok(); msg != "" {
			t.Fatal(msg)
		}
	}
}

// TestHandOver runs two cdi-bridge processes of one node sharing
// --node-lock, the old pod's and the new one's of a DaemonSet update
// with maxSurge that changes --dra-pools. While the old one runs, each
// pool is served by the front end the old one serves it by: a pool
// moved to DRA has no ResourceSlice, and the new bridge serves it
// through its device plugins (its CDI spec file, which the old one's
// containers name, stays); a pool moved off DRA is held back from the
// new bridge's device plugins. The new bridge is ready meanwhile. Once
// the old one stops, the new one serves each pool as its own flags say.
func TestHandOver(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const resource = "cdi.test/tty-generic"
	t.Run("a pool moved to DRA", func(t *testing.T) {
		n := newSurgeNode(t, env, client, "to-dra")
		specFile := filepath.Join(n.cdiDir, cdispec.FileName(cdispec.Kind{Vendor: "cdi.test", Class: "tty-generic"}))
		old := n.start(t, "old-pod", "")
		if _, err := n.host.Kubelet.WaitFor(resource, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
			t.Fatal(err)
		}
		next := n.start(t, "new-pod", "tty-generic")
		n.registerDRA(t, "new-pod")
		next.waitReady(t)
		if got := next.registered(t, resource); got < 1 {
			t.Errorf("the new bridge registered %s %v times while the old one held the node, want its device plugin", resource, got)
		}
		during(t, 3*time.Second, func() string {
			var msgs []string
			if n := countSliceDevices(t, client, "to-dra/tty-generic"); n != 0 {
				msgs = append(msgs, "a ResourceSlice of the pool was published while the old bridge served it through device plugins")
			}
			if _, err := os.Stat(specFile); err != nil {
				msgs = append(msgs, "the pool's CDI spec file, which the old bridge's containers need: "+err.Error())
			}
			return strings.Join(msgs, "; ")
		})
		old.stop(t)
		if got := waitSliceDevices(t, client, "to-dra/tty-generic", 2); got != 2 {
			t.Fatalf("once the old bridge stopped: %d devices in the pool's slices, want 2", got)
		}
		if recs := next.log.records("took over the node from the bridge that held its lock: this bridge writes the node's ResourceSlices, its own --dra-pools split the pools"); len(recs) != 1 {
			t.Errorf("the new bridge logged %d take-overs, want 1", len(recs))
		}
	})
	t.Run("a pool moved off DRA", func(t *testing.T) {
		n := newSurgeNode(t, env, client, "off-dra")
		old := n.start(t, "old-pod", "tty-generic")
		if got := waitSliceDevices(t, client, "off-dra/tty-generic", 2); got != 2 {
			t.Fatalf("the old bridge published %d devices, want 2", got)
		}
		next := n.start(t, "new-pod", "")
		next.waitReady(t)
		during(t, 3*time.Second, func() string {
			if got := next.registered(t, resource); got != 0 {
				return "the new bridge registered a device plugin of a pool the old one serves through DRA"
			}
			return ""
		})
		old.stop(t)
		if _, err := n.host.Kubelet.WaitFor(resource, wait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
			t.Fatalf("once the old bridge stopped: %v", err)
		}
		// Let go at its stop, not left to the kernel at its exit.
		if recs := old.log.records("released the node lock: the slice controller has stopped"); len(recs) != 1 {
			t.Errorf("the old bridge logged %d releases of the node lock, want 1", len(recs))
		}
	})
}

// countSliceDevices counts the devices of pool in the driver's slices.
func countSliceDevices(t *testing.T, client kubernetes.Interface, pool string) int {
	t.Helper()
	l, err := client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: "spec.driver=cdi.test"})
	if err != nil {
		t.Fatal(err)
	}
	devices := 0
	for _, s := range l.Items {
		if s.Spec.Pool.Name == pool {
			devices += len(s.Spec.Devices)
		}
	}
	return devices
}

// A --node-lock that others could swap stops the bridge at its start,
// saying why, before it waits for anything.
func TestNodeLockRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--node-name", "n", "--node-lock", filepath.Join(dir, "node.lock")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := openNodeLock(t.Context(), o, slog.New(slog.DiscardHandler), func(err error) { t.Errorf("fail(%v)", err) })
	if !errors.Is(err, handover.ErrUnsafe) || !strings.Contains(err.Error(), "--node-lock") || l != nil {
		t.Errorf("openNodeLock = %v, %v; want a --node-lock error wrapping %v", l, err, handover.ErrUnsafe)
	}
}

// A bridge waiting for the node lock whose file is swapped for a FIFO
// (the holder keeps the old file locked) stops, saying why, rather than
// wait for good or take the FIFO for the lock.
func TestNodeLockSwappedWhileWaiting(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "node.lock")
	holder, err := handover.Open(lock, handover.Record{PodUID: "old-pod"})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if held, err := holder.TryAcquire(); !held || err != nil {
		t.Fatalf("TryAcquire = %v, %v", held, err)
	}
	h := kubelettest.NewHost(t)
	waiting := make(chan string, 1)
	log := &logWatcher{addr: waiting}
	cmd := exec.Command(filepath.Join(binDir, "cdi-bridge"), "--conf-dir", t.TempDir(), "--plugin-path", binDir, "--node-name", "n1",
		"--device-plugin-dir", h.Dir, "--pod-resources-socket", "", "--domain", "cdi.test", "--store", "local",
		"--local-store", filepath.Join(t.TempDir(), "i.json"), "--metrics-address", "127.0.0.1:0", "--cdi-spec-dir", t.TempDir(),
		"--node-lock", lock)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for deadline := time.Now().Add(wait); len(log.records("waiting for the node lock held by another bridge: no ResourceSlice is written until it is had, and the pools are split between the front ends as the holder splits them")) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the bridge did not log its wait for the node lock")
		}
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(lock, 0o600); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("the bridge exited with %v, want 1", err)
		}
	case <-time.After(wait):
		t.Fatal("the bridge still runs after its node lock was swapped for a FIFO")
	}
	var said bool
	for _, l := range log.rawLines() {
		said = said || strings.Contains(string(l), "--node-lock: unsafe node lock: "+lock+" is a FIFO")
	}
	if !said {
		t.Error("the bridge did not say that its node lock is a FIFO")
	}
}

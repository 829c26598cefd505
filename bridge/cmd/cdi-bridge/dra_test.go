package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// startSlices, the first of the DRA front end's parts to start, refuses
// a command line whose front end could not work, before it starts
// anything, and starts nothing without --dra-pools; nor does startDRA.
func TestStartDRARefuses(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	api := &kubeAccess{client: fake.NewClientset()}
	for name, tc := range map[string]struct {
		args []string
		api  *kubeAccess
	}{
		"without CDI":     {[]string{"--cdi-names=false"}, api},
		"without the API": {nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			o, err := parseFlags(append(tc.args, "--dra-pools", "tty-generic", "--node-name", "n", "--cdi-spec-dir", filepath.Join(t.TempDir(), "cdi")))
			if err != nil {
				t.Fatal(err)
			}
			slices, err := startSlices(t.Context(), o, tc.api, nil, log)
			if !errors.Is(err, errUsage) || slices != nil {
				t.Errorf("startSlices = %v, %v; want a usage error", slices, err)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		o, err := parseFlags([]string{"--node-name", "n"})
		if err != nil {
			t.Fatal(err)
		}
		slices, err := startSlices(t.Context(), o, api, nil, log)
		if slices != nil || err != nil {
			t.Errorf("startSlices without --dra-pools = %v, %v", slices, err)
		}
		if front, err := startDRA(t.Context(), o, api, slices, nil, nil, nil, metrics.New("test"), log, func(error) {}); front != nil || err != nil {
			t.Errorf("startDRA without --dra-pools = %v, %v", front, err)
		}
	})
}

// The binary with --dra-pools: the listed pool's devices are published as
// ResourceSlices and registered with the kubelet as a DRA driver, never
// as a device plugin; the other drop-in's pool stays a device plugin. The
// bridge runs as a user with the shipped DRA ClusterRole only; a bridge
// whose user may not touch ResourceSlices still serves its device plugins.
func TestDRAFrontEnd(t *testing.T) {
	env := apitest.Start(t, apitest.Options{Users: []apitest.User{{Name: "bridge"}, {Name: "nobody"}}})
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	schedtest.BindDRARole(t, client, "bridge")
	t.Run("with the DRA role", func(t *testing.T) {
		h, regDir := startDRABridge(t, env, client, "n1", "bridge")
		if n := waitSliceDevices(t, client, "n1/tty-generic", 2); n != 2 {
			t.Fatalf("ResourceSlices of n1/tty-generic: %d devices, want 2", n)
		}
		if _, err := os.Stat(filepath.Join(regDir, "cdi.test-reg.sock")); err != nil {
			t.Errorf("the DRA driver's registration socket: %v", err)
		}
		for _, r := range h.Kubelet.Registrations() {
			if strings.Contains(r.ResourceName, "tty") {
				t.Errorf("a DRA pool registered as a device plugin: %s", r.ResourceName)
			}
		}
	})
	t.Run("without it", func(t *testing.T) {
		startDRABridge(t, env, client, "n2", "nobody")
		if n := waitSliceDevices(t, client, "n2/tty-generic", 2); n != 0 {
			t.Errorf("ResourceSlices of n2/tty-generic: %d devices, want none", n)
		}
	})
}

// startDRABridge runs cdi-bridge as node, with --dra-pools tty-generic
// over two terminals and a drop-in of two USB serial adapters served as a
// device plugin, its API user user; it returns once that device plugin
// lists both adapters.
func startDRABridge(t *testing.T, env *apitest.Env, client kubernetes.Interface, node, user string) (h *kubelettest.Host, regDir string) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	confDir := t.TempDir()
	writeDropIn(t, confDir, "tty.d/generic.conf", map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": exectest.FixtureRoot(t), "stateDir": exectest.StateDir(t), "num_system_reserved": 42}})
	writeDropIn(t, confDir, "dev.d/usb.conf", map[string]any{"cdiVersion": "0.1.0", "name": "u", "type": "dev", "plugin": "generic",
		"args": map[string]any{"root": exectest.FixtureRoot(t), "stateDir": exectest.StateDir(t),
			"groups": []map[string]any{{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}}})
	h = kubelettest.NewHost(t)
	draDir := kubelettest.SocketDir(t, "dra")
	regDir = filepath.Join(draDir, "registry")
	if err := os.Mkdir(regDir, 0o700); err != nil {
		t.Fatal(err)
	}
	checkpoint, cdiDir := filepath.Join(t.TempDir(), "claims.json"), t.TempDir()
	cmd := exec.Command(filepath.Join(binDir, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", binDir, "--node-name", node,
		"--device-plugin-dir", h.Dir, "--pod-resources-socket", h.PodResourcesSocket, "--domain", "cdi.test", "--metrics-address", "",
		"--cdi-spec-dir", cdiDir, "--store", "local", "--local-store", filepath.Join(t.TempDir(), "i.json"),
		"--kubeconfig", env.Kubeconfig(t, user), "--dra-pools", "tty-generic", "--dra-checkpoint", checkpoint,
		"--dra-plugin-dir", filepath.Join(draDir, "plugin"), "--dra-registrar-dir", regDir)
	proctest.Start(t, cmd, "cdi-bridge", nil)
	if _, err := h.Kubelet.WaitFor("cdi.test/dev-serial-usb", wait, func(_ int, d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
	return h, regDir
}

// waitSliceDevices waits, for at most wait, until the slices of pool hold
// want devices, and returns how many they hold.
func waitSliceDevices(t *testing.T, client kubernetes.Interface, pool string, want int) int {
	t.Helper()
	var devices int
	_ = kwait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, wait, true, func(ctx context.Context) (bool, error) {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=cdi.test"})
		if err != nil {
			return false, nil
		}
		devices = 0
		for _, s := range l.Items {
			if s.Spec.Pool.Name == pool {
				devices += len(s.Spec.Devices)
			}
		}
		return devices == want, nil
	})
	return devices
}

func writeDropIn(t *testing.T, confDir, path string, doc map[string]any) {
	t.Helper()
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(confDir, filepath.Dir(path)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, path), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec/invoke"
)

func TestSplitPools(t *testing.T) {
	tty := &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf"}
	dev := &invoke.Conf{Path: "/etc/cdi/dev.d/generic.conf"}
	pools := []discovery.Pool{
		{Name: "tty-generic", Conf: tty}, {Name: "dev-serial-generic", Conf: dev}, {Name: "dev-video-generic", Conf: dev},
	}
	for _, tc := range []struct {
		flag          string
		devicePlugins string
		dra           string
	}{
		{"", "[tty-generic dev-serial-generic dev-video-generic]", "[]"},
		{"tty-generic", "[dev-serial-generic dev-video-generic]", "[tty-generic]"},
		// A pool takes its drop-in's other pools: they share one state.
		{"dev-video-generic", "[tty-generic]", "[dev-serial-generic dev-video-generic]"},
		{" tty-generic , nothing-here,", "[dev-serial-generic dev-video-generic]", "[tty-generic]"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			dp, viaDRA := splitPools(pools, parsePoolList(tc.flag))
			if got := fmt.Sprint(names(dp)); got != tc.devicePlugins {
				t.Errorf("device plugins %s, want %s", got, tc.devicePlugins)
			}
			if got := fmt.Sprint(names(viaDRA)); got != tc.dra {
				t.Errorf("DRA %s, want %s", got, tc.dra)
			}
		})
	}
}

func names(pools []discovery.Pool) []string {
	out := []string{}
	for _, p := range pools {
		out = append(out, p.Name)
	}
	return out
}

func TestStartDRARefuses(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	// A kubeconfig naming a server nobody serves: startDRA reaches the
	// checkpoint without talking to it.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want error
	}{
		"without CDI":                  {[]string{"--cdi-names=false", "--kubeconfig", kubeconfig}, errUsage},
		"without the API":              {nil, errUsage},
		"a checkpoint that is no file": {[]string{"--dra-checkpoint", "/", "--kubeconfig", kubeconfig}, dradevices.ErrCheckpoint},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "") // never in a cluster
			o, err := parseFlags(append(tc.args, "--dra-pools", "tty-generic", "--node-name", "n", "--cdi-spec-dir", filepath.Join(t.TempDir(), "cdi")))
			if err != nil {
				t.Fatal(err)
			}
			front, err := startDRA(context.Background(), o, nil, nil, log, func(error) {})
			if !errors.Is(err, tc.want) || front != nil {
				t.Errorf("startDRA = %v, %v; want %v", front, err, tc.want)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		o, err := parseFlags([]string{"--node-name", "n"})
		if err != nil {
			t.Fatal(err)
		}
		if front, err := startDRA(context.Background(), o, nil, nil, log, func(error) {}); front != nil || err != nil {
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
	bindDRARole(t, client, "bridge")
	t.Run("with the DRA role", func(t *testing.T) {
		// A claim prepared before the bridge stopped, and deleted since.
		var ckpt, spec string
		seed := func(checkpoint, cdiDir string) {
			ckpt, spec = checkpoint, filepath.Join(cdiDir, dradevices.SpecFile("gone"))
			writeFile(t, ckpt, `{"version":1,"claims":{"gone":{"namespace":"ns","name":"gone","devices":[`+
				`{"request":"r","pool":"tty-generic","device":"tty43","id":"tty43","resource":"tty","requestId":"gone-0"}]}}}`)
			writeFile(t, spec, `{"cdiVersion":"0.3.0","kind":"cdi.test/claim","devices":[]}`)
		}
		h, regDir := startDRABridge(t, env, client, "n1", "bridge", seed)
		if n := waitSliceDevices(t, client, "n1/tty-generic", 2); n != 2 {
			t.Fatalf("ResourceSlices of n1/tty-generic: %d devices, want 2", n)
		}
		err := kwait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, wait, true, func(context.Context) (bool, error) {
			c, err := dradevices.LoadCheckpoint(ckpt)
			_, statErr := os.Stat(spec)
			return err == nil && len(c.UIDs()) == 0 && errors.Is(statErr, os.ErrNotExist), nil
		})
		if err != nil {
			t.Errorf("the deleted claim is still prepared: %v", err)
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
		startDRABridge(t, env, client, "n2", "nobody", nil)
		if n := waitSliceDevices(t, client, "n2/tty-generic", 2); n != 0 {
			t.Errorf("ResourceSlices of n2/tty-generic: %d devices, want none", n)
		}
	})
}

// startDRABridge runs cdi-bridge as node, with --dra-pools tty-generic
// over two terminals and a drop-in of two USB serial adapters served as a
// device plugin, its API user user; it returns once that device plugin
// lists both adapters. seed, if not nil, is given the checkpoint's path
// and the CDI spec directory before the bridge starts.
func startDRABridge(t *testing.T, env *apitest.Env, client kubernetes.Interface, node, user string,
	seed func(checkpoint, cdiDir string)) (h *kubelettest.Host, regDir string) {
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
	if seed != nil {
		seed(checkpoint, cdiDir)
	}
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

// bindDRARole gives user the shipped ClusterRole of the DRA front end
// (bridge/deploy/examples/dra/rbac.yaml) and nothing else, so that the
// test shows it is enough.
func bindDRARole(t *testing.T, client kubernetes.Interface, user string) {
	t.Helper()
	data, err := os.ReadFile("../../deploy/examples/dra/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal([]byte(strings.Split(string(data), "\n---\n")[0]), &role); err != nil || role.Kind != "ClusterRole" {
		t.Fatalf("rbac.yaml's first document: %+v, %v", role, err)
	}
	if _, err := client.RbacV1().ClusterRoles().Create(t.Context(), &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
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

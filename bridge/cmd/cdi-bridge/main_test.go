package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/deviceplugin/kubelettest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// binDir holds the built cdi-bridge and generic-tty side by side.
var binDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &binDir, ".", "github.com/cdiexec/cdi/plugins/generic-tty")
}

// TestBinary runs the built cdi-bridge as a process against the
// kubelet-side fake and the real generic-tty plugin: it must register
// its resources, and on SIGTERM withdraw them and exit 0.
func TestBinary(t *testing.T) {
	bin := binDir
	root := exectest.FixtureRoot(t)
	confDir := t.TempDir()
	conf, _ := json.Marshal(map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": 42}})
	_ = os.MkdirAll(filepath.Join(confDir, "tty.d"), 0o755)
	if err := os.WriteFile(filepath.Join(confDir, "tty.d", "generic.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	dpDir, _ := os.MkdirTemp("", "br")
	defer os.RemoveAll(dpDir)
	k, err := kubelettest.Start(dpDir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	cmd := exec.Command(filepath.Join(bin, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", bin, "--node-name", "n1",
		"--device-plugin-dir", dpDir, "--domain", "cdi.test", "--local-store", filepath.Join(t.TempDir(), "i.json"), "--health-address", "127.0.0.1:0")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if _, err := k.WaitFor("cdi.test/tty-generic", 20*time.Second, func(n int, d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitFor("cdi.test/tty-generic", 20*time.Second, func(n int, d []*pluginapi.Device) bool { return d != nil && len(d) == 0 }); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cdi-bridge exited with %v", err)
	}
	if socks, _ := filepath.Glob(filepath.Join(dpDir, "cdi.test_*.sock")); len(socks) != 0 {
		t.Errorf("sockets left behind: %v", socks)
	}
}

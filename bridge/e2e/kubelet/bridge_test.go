package kubelet

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
)

const (
	domain   = "cdi.test"
	nodeName = "n1"
)

// bridgeFiles are what a bridge keeps across its restarts: the
// drop-ins, the plugins' state, the Instance store and the CDI specs.
type bridgeFiles struct {
	confDir, store, cdiDir string
	// state is the plugins' stateDir.
	state string
}

// newBridgeFiles copies the project's drop-ins with root pointed at the
// fixture host and stateDir at a directory of the test.
func newBridgeFiles(t *testing.T) bridgeFiles {
	t.Helper()
	state := exectest.StateDir(t)
	f := bridgeFiles{confDir: t.TempDir(), store: filepath.Join(t.TempDir(), "instances.json"), cdiDir: t.TempDir(), state: state}
	drops, err := filepath.Glob(filepath.Join(build.root, "conf.d", "*", "*.conf"))
	if err != nil || len(drops) == 0 {
		t.Fatalf("no drop-ins under %s/conf.d (%v)", build.root, err)
	}
	for _, src := range drops {
		var doc map[string]any
		if err := readJSON(src, &doc); err != nil {
			t.Fatal(err)
		}
		args, _ := doc["args"].(map[string]any)
		if args == nil {
			t.Fatalf("%s has no args", src)
		}
		if _, ok := args["root"]; ok {
			args["root"] = filepath.Join(build.root, "testdata", "root")
		}
		args["stateDir"] = state
		dst := filepath.Join(f.confDir, filepath.Base(filepath.Dir(src)), filepath.Base(src))
		if err := writeJSON(dst, doc); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// bridge is one cdi-bridge process.
type bridge struct {
	cmd *exec.Cmd
	log string
	// exited is closed when the process has ended; err is then Wait's.
	exited chan struct{}
	err    error
	// stopping says the test ended the process on purpose.
	stopping bool
}

// startBridge runs cdi-bridge on the kubelet's directory with files. It
// is stopped with SIGTERM when the test ends, unless stopped before.
func startBridge(t *testing.T, k *kubelet, f bridgeFiles) *bridge {
	t.Helper()
	logFile, err := os.CreateTemp(t.TempDir(), "bridge-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	b := &bridge{log: logFile.Name(), exited: make(chan struct{})}
	b.cmd = exec.Command(filepath.Join(build.bin, "cdi-bridge"),
		"--conf-dir", f.confDir, "--plugin-path", build.bin, "--node-name", nodeName,
		"--device-plugin-dir", k.dir, "--domain", domain, "--local-store", f.store, "--cdi-spec-dir", f.cdiDir,
		build.addressFlag, "127.0.0.1:0", "--log-level", "debug")
	// A race in the bridge ends it at once, with the report in its log.
	b.cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	b.cmd.Stdout, b.cmd.Stderr = logFile, logFile
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.exited) }()
	t.Cleanup(func() {
		if !b.stopping {
			b.stop(t, syscall.SIGTERM)
		}
	})
	return b
}

// stop signals the bridge and waits for it to end. After SIGTERM it must
// exit 0 (it ends its device plugins' streams first); SIGKILL is a crash.
func (b *bridge) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	select {
	case <-b.exited:
		b.dumpLog(t)
		t.Fatalf("cdi-bridge ended before the test stopped it: %v", b.err)
	default:
	}
	b.stopping = true
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.exited:
	case <-time.After(waitFor):
		_ = b.cmd.Process.Kill()
		<-b.exited
		b.dumpLog(t)
		t.Fatalf("cdi-bridge did not end within %v of %v", waitFor, sig)
	}
	if raced := b.raced(); raced {
		b.dumpLog(t)
		t.Fatal("the race detector reported a data race in cdi-bridge")
	}
	var exitErr *exec.ExitError
	if sig == syscall.SIGTERM && errors.As(b.err, &exitErr) {
		b.dumpLog(t)
		t.Fatalf("cdi-bridge exited with %v after SIGTERM", b.err)
	}
}

// raced reports whether the race detector wrote a report to the log.
func (b *bridge) raced() bool {
	out, _ := os.ReadFile(b.log)
	return bytes.Contains(out, []byte("WARNING: DATA RACE"))
}

// dumpLog puts the end of the bridge's log in the test's output.
func (b *bridge) dumpLog(t *testing.T) {
	t.Helper()
	if b == nil {
		return
	}
	out, err := os.ReadFile(b.log)
	if err != nil {
		t.Logf("reading the bridge's log: %v", err)
		return
	}
	const tail = 16 << 10
	if len(out) > tail {
		out = out[len(out)-tail:]
	}
	t.Logf("end of the cdi-bridge log %s:\n%s", b.log, out)
}

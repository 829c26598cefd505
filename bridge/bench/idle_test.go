package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
)

// idleRun is the CPU one cdi-bridge process used while nothing changed.
type idleRun struct {
	watch bool
	cpu   time.Duration // user and system, over the window
}

// idleDevices is the terminals of the idle bridges' drop-in.
const idleDevices = 100

// idleCPU starts cdi-bridge without and with --watch-devices over the
// same 100 terminals, twice each in turn (a machine whose load drifts
// shifts both alike), and measures the CPU each uses over b.o.idle once
// serving, with nothing changing.
func (b *bench) idleCPU(ctx context.Context) ([]idleRun, error) {
	var runs []idleRun
	for i := range 2 {
		for _, watch := range []bool{false, true} {
			b.progress("idle CPU: cdi-bridge --watch-devices=%v for %v (run %d of 2)", watch, b.o.idle, i+1)
			cpu, err := b.idleBridge(ctx, filepath.Join(b.tmp, fmt.Sprintf("idle-%v-%d", watch, i)), watch)
			if err != nil {
				return nil, fmt.Errorf("idle CPU, --watch-devices=%v: %w", watch, err)
			}
			runs = append(runs, idleRun{watch: watch, cpu: cpu})
		}
	}
	return runs, nil
}

// idleBridge runs one cdi-bridge until it serves every terminal, lets it
// settle, and returns the CPU it used over the window that follows.
func (b *bench) idleBridge(ctx context.Context, dir string, watch bool) (time.Duration, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return 0, err
	}
	for i := range idleDevices {
		if err := os.WriteFile(filepath.Join(root, "dev", ttyName(i)), nil, 0o644); err != nil {
			return 0, err
		}
	}
	confDir := filepath.Join(dir, "conf")
	if err := writeDropIn(confDir, "tty.d/generic.conf", map[string]any{"cdiVersion": "0.1.0", "name": "idle",
		"type": "tty", "plugin": "generic-tty", "args": map[string]any{"root": root,
			"stateDir": filepath.Join(dir, "state"), "num_system_reserved": 40, "capacity": 1}}); err != nil {
		return 0, err
	}
	dpDir, err := os.MkdirTemp("", "cdii")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dpDir)
	k, err := startKubelet(dpDir)
	if err != nil {
		return 0, err
	}
	defer k.stop()
	cmd := exec.CommandContext(ctx, filepath.Join(b.bin, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", b.bin,
		"--node-name", nodeName, "--device-plugin-dir", dpDir, "--domain", domain, "--store", "local",
		"--local-store", filepath.Join(dir, "instances.json"), "--pod-resources-socket", "", "--metrics-address", "",
		"--cdi-spec-dir", filepath.Join(dir, "cdi"), "--log-level", "warn", "--watch-devices="+strconv.FormatBool(watch))
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting cdi-bridge: %w", err)
	}
	cpu, err := idleWindow(k, cmd.Process.Pid, b.o.idle)
	if _, serr := stopBridge(cmd); err == nil {
		err = serr
	}
	return cpu, err
}

// idleWindow waits until the bridge serves every terminal and has been
// quiet for a second, then measures its CPU over window.
func idleWindow(k *kubelet, pid int, window time.Duration) (time.Duration, error) {
	if _, err := k.waitList(domain+"/"+ttyPool, 0, time.Minute, allHealthy(idleDevices)); err != nil {
		return 0, err
	}
	if err := k.quiet(time.Second, time.Minute); err != nil {
		return 0, err
	}
	before, err := proctest.CPU(pid)
	if err != nil {
		return 0, err
	}
	time.Sleep(window)
	after, err := proctest.CPU(pid)
	return after - before, err
}

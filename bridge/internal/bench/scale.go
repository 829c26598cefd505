package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
)

// endpointPool is the pool of the endpoint drop-in scale writes.
const endpointPool = "camera-endpoint"

// startRun is one start of the cdi-bridge binary.
type startRun struct {
	// ready is from the process start until every plugin had registered
	// and its stream had delivered its complete list.
	ready time.Duration
	// rss and hwm are VmRSS (once serving) and VmHWM, in bytes.
	rss, hwm int64
}

// startBridge starts cdi-bridge over the endpoint plugin with devices
// endpoints of capacity slots each (no probe) and the local store, waits
// until it serves, reads its memory, and stops it with SIGTERM.
func startBridge(ctx context.Context, binDir, dir string, devices, capacity int) (startRun, error) {
	confDir := filepath.Join(dir, "conf")
	if err := writeDropIn(confDir, "camera.d/endpoint.conf", endpointDropIn(dir, devices, capacity)); err != nil {
		return startRun{}, err
	}
	dpDir, err := os.MkdirTemp("", "cdis")
	if err != nil {
		return startRun{}, fmt.Errorf("device-plugin directory: %w", err)
	}
	defer os.RemoveAll(dpDir)
	k, err := startKubelet(dpDir)
	if err != nil {
		return startRun{}, err
	}
	defer k.stop()
	logPath := filepath.Join(dir, "cdi-bridge.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return startRun{}, fmt.Errorf("bridge log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", binDir,
		"--node-name", nodeName, "--device-plugin-dir", dpDir, "--domain", domain, "--store", "local",
		"--local-store", filepath.Join(dir, "instances.json"), "--pod-resources-socket", "", "--metrics-address", "",
		"--cdi-spec-dir", filepath.Join(dir, "cdi"),
		"--log-level", "warn")
	cmd.Stderr = logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return startRun{}, fmt.Errorf("starting cdi-bridge: %w", err)
	}
	run, err := serving(k, cmd.Process.Pid, start, devices, capacity)
	if serr := stopBridge(cmd); err == nil {
		err = serr
	}
	if err != nil {
		log, _ := os.ReadFile(logPath)
		return run, fmt.Errorf("%w; cdi-bridge's log:\n%s", err, log)
	}
	return run, nil
}

// serving waits until every plugin has delivered its complete list, then
// lets the bridge idle for a second (the start-up's garbage collected)
// and reads its memory.
func serving(k *kubelet, pid int, start time.Time, devices, capacity int) (startRun, error) {
	var run startRun
	const timeout = time.Minute
	if err := k.waitStreams(devices+1, timeout); err != nil {
		return run, err
	}
	resources := map[string]int{domain + "/" + endpointPool: devices}
	for i := range devices {
		resources[domain+"/"+instance.Name(endpointPool, endpointID(i), "", true)] = capacity
	}
	var last time.Time
	for res, n := range resources {
		l, err := k.waitList(res, 0, timeout, allHealthy(n))
		if err != nil {
			return run, err
		}
		last = later(last, l.At)
	}
	run.ready = last.Sub(start)
	time.Sleep(time.Second)
	var err error
	run.rss, run.hwm, err = memory(pid)
	return run, err
}

// stopBridge sends SIGTERM and waits for a clean exit.
func stopBridge(cmd *exec.Cmd) error {
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping cdi-bridge: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("cdi-bridge exited: %w", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("cdi-bridge did not exit within 30s of SIGTERM")
	}
}

func endpointID(i int) string { return fmt.Sprintf("cam%03d", i) }

// endpointDropIn lists devices endpoints in TEST-NET-1, with no probe:
// every one is healthy without a network.
func endpointDropIn(dir string, devices, capacity int) map[string]any {
	eps := make([]map[string]any, devices)
	for i := range eps {
		eps[i] = map[string]any{"id": endpointID(i), "url": fmt.Sprintf("rtsp://192.0.2.%d:%d/stream", i%250+1, 8000+i)}
	}
	return map[string]any{"cdiVersion": "0.1.0", "name": "bench cameras", "type": "camera", "plugin": "endpoint",
		"args": map[string]any{"stateDir": filepath.Join(dir, "state"), "capacity": capacity,
			"probe": map[string]any{"tcp": false}, "endpoints": eps}}
}

// memory reads VmRSS and VmHWM of pid, in bytes.
func memory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("process memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, key, err)
		}
		if key == "VmRSS" {
			rss = kib << 10
		} else {
			hwm = kib << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS or VmHWM: %w", pid, sc.Err())
	}
	return rss, hwm, nil
}

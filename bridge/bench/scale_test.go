package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	// goroutines (the bridge's go_goroutines), fds and threads, once
	// serving.
	goroutines, fds, threads int
	// stop is from SIGTERM to the process's exit.
	stop time.Duration
}

// startBridge starts cdi-bridge over the endpoint plugin with row's
// endpoints (no probe) and the local store, waits until it serves, reads
// its figures, and stops it with SIGTERM.
func startBridge(ctx context.Context, binDir, dir string, row *scaleRow) (startRun, error) {
	confDir := filepath.Join(dir, "conf")
	if err := writeDropIn(confDir, "camera.d/endpoint.conf", endpointDropIn(dir, row.devices, row.capacity)); err != nil {
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
	metrics, err := freeAddress()
	if err != nil {
		return startRun{}, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "cdi-bridge"), "--conf-dir", confDir, "--plugin-path", binDir,
		"--node-name", nodeName, "--device-plugin-dir", dpDir, "--domain", domain, "--store", "local",
		"--local-store", filepath.Join(dir, "instances.json"), "--pod-resources-socket", "", "--metrics-address", metrics,
		"--cdi-spec-dir", filepath.Join(dir, "cdi"), "--log-level", "warn",
		"--max-instance-level-devices", strconv.Itoa(row.maxInstanceLevel()))
	cmd.Stderr = logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return startRun{}, fmt.Errorf("starting cdi-bridge: %w", err)
	}
	run, err := serving(k, cmd.Process.Pid, start, row)
	if err == nil {
		run.goroutines, err = goroutines(ctx, metrics)
	}
	var serr error
	if run.stop, serr = stopBridge(cmd); err == nil {
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
func serving(k *kubelet, pid int, start time.Time, row *scaleRow) (startRun, error) {
	var run startRun
	const timeout = time.Minute
	if err := k.waitStreams(row.plugins(), timeout); err != nil {
		return run, err
	}
	resources := map[string]int{domain + "/" + endpointPool: row.devices}
	for i := range row.devices * row.plugins() / (row.devices + 1) {
		resources[domain+"/"+instance.Name(endpointPool, endpointID(i), "", true)] = row.capacity
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
	if run.rss, run.hwm, run.threads, err = status(pid); err != nil {
		return run, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	run.fds = len(fds)
	return run, err
}

// stopBridge sends SIGTERM, waits for a clean exit and returns how long
// it took.
func stopBridge(cmd *exec.Cmd) (time.Duration, error) {
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("stopping cdi-bridge: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return 0, fmt.Errorf("cdi-bridge exited: %w", err)
		}
		return time.Since(start), nil
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-done
		return 0, errors.New("cdi-bridge did not exit within 30s of SIGTERM")
	}
}

// freeAddress is a loopback address with a port nothing listens on now.
func freeAddress() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("a free port: %w", err)
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// goroutines reads go_goroutines from the bridge's /metrics.
func goroutines(ctx context.Context, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the bridge's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("the bridge's metrics have no go_goroutines: %w", sc.Err())
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

// status reads VmRSS and VmHWM of pid, in bytes, and its threads.
func status(pid int) (rss, hwm int64, threads int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("process status: %w", err)
	}
	defer f.Close()
	fields := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM" && key != "Threads") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, key, err)
		}
		fields[key] = n
	}
	if fields["VmRSS"] == 0 || fields["VmHWM"] == 0 || fields["Threads"] == 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/status lacks VmRSS, VmHWM or Threads: %w", pid, sc.Err())
	}
	return fields["VmRSS"] << 10, fields["VmHWM"] << 10, int(fields["Threads"]), nil
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
)

// memFigures are the bench's heap in use after a GC and the servers'
// VmRSS, in bytes.
type memFigures struct {
	heap            uint64
	apiserver, etcd int64
}

func (s *sim) memory() (memFigures, error) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	f := memFigures{heap: m.HeapInuse}
	etcd, apiserver := s.env.PIDs()
	var err error
	if f.apiserver, err = vmRSS(apiserver); err != nil {
		return f, fmt.Errorf("kube-apiserver: %w", err)
	}
	if f.etcd, err = vmRSS(etcd); err != nil {
		return f, fmt.Errorf("etcd: %w", err)
	}
	return f, nil
}

// vmRSS reads VmRSS of pid, in bytes.
func vmRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("process status: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process status: VmRSS %q: %w", v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("process status of %d: no VmRSS", pid)
}

// cpuTimes are the CPU time, user and system, of the API server, etcd
// and this process (the stores, and the simulation driving them).
type cpuTimes struct{ apiserver, etcd, bench time.Duration }

func (s *sim) cpu() (cpuTimes, error) {
	var c cpuTimes
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return c, fmt.Errorf("CPU time: %w", err)
	}
	c.bench = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	etcd, apiserver := s.env.PIDs()
	var err error
	if c.apiserver, err = proctest.CPU(apiserver); err != nil {
		return c, fmt.Errorf("kube-apiserver: %w", err)
	}
	if c.etcd, err = proctest.CPU(etcd); err != nil {
		return c, fmt.Errorf("etcd: %w", err)
	}
	return c, nil
}

// objectSize is the bytes of one Instance as the API server sends it as
// JSON, managedFields and all: what every informer holds and every watch
// event carries.
func (s *sim) objectSize(ctx context.Context) (int, error) {
	body, err := s.get(ctx, fmt.Sprintf("/apis/%s/%s/namespaces/%s/%s/%s", kube.Group, kube.Version,
		s.ns, kube.Resource.Resource, s.devices[0].Name))
	return len(body), err
}

// closedWatchers is how many watchers of the Instances the API server has
// closed because they did not keep up with its events (its metric
// apiserver_terminated_watchers_total); each makes an informer watch
// again.
func (s *sim) closedWatchers(ctx context.Context) (int, error) {
	body, err := s.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf(`apiserver_terminated_watchers_total{group=%q,resource=%q} `, kube.Group, kube.Resource.Resource)
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("metric %s: %w", sc.Text(), err)
			}
			return int(n), nil
		}
	}
	return 0, sc.Err() // none closed yet: the metric has no line
}

// get reads path from the API server as the admin, as JSON.
func (s *sim) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.env.Config.Host+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("reading %s: %s", path, resp.Status)
	}
	return body, err
}

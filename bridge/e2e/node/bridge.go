package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

const (
	// bridgeReadyz is the bridge's readiness endpoint, on the
	// DaemonSet's --metrics-address (:8089), which in the node's network
	// namespace is the node's alone.
	bridgeReadyz = "http://127.0.0.1:8089/readyz"
	// bridgeReadyWait bounds the wait for the bridge's first discovery
	// to reach the kubelet.
	bridgeReadyWait = time.Minute
	// domain is the bridge's resource domain (its default).
	domain = "cdi.local"
)

// Reclaim is quick here: a deleted pod's slot comes back within seconds.
const (
	reclaimGrace  = 3 * time.Second
	reclaimPeriod = time.Second
)

// DropIn is one of the bridge's drop-ins: <conf-dir>/<Type>.d/<ID>.conf.
type DropIn struct {
	Type, ID, Plugin string
	Args             map[string]any
}

// Pool is the bridge's name for the drop-in's devices: its
// Configuration-level resource is <domain>/<Pool>. The bridge names a
// pool "<type>-<drop-in id>" (bridge/discovery.PoolName), lower-cased,
// which these are already; StartNode waits until the Node's allocatable
// shows these names, so a bridge naming them otherwise fails there.
func (d DropIn) Pool() string { return d.Type + "-" + d.ID }

// The drop-ins: this machine's own virtual terminals, a few of them (the
// highest-numbered: nothing uses those), and two network cameras, each
// with two usage slots. The lobby camera has a variable of its own, the
// kind a container must see beside the one every camera sets.
const ttysOffered = 4

var cameras = []map[string]any{
	{"id": "lobby", "url": "rtsp://192.0.2.10/stream1", "env": map[string]string{"CAMERA_CODEC": "h264"}},
	{"id": "loading-dock", "url": "rtsp://192.0.2.11:8554/live"},
}

// dropIns are the drop-ins for a node whose plugins keep their state in
// stateDir and whose terminals above reserved are offered.
func dropIns(stateDir string, reserved int) []DropIn {
	return []DropIn{
		{Type: "tty", ID: "generic", Plugin: "generic-tty", Args: map[string]any{
			"root": "/", "stateDir": stateDir, "num_system_reserved": reserved}},
		{Type: "camera", ID: "endpoint", Plugin: "endpoint", Args: map[string]any{
			"stateDir": stateDir, "capacity": 2, "envPrefix": "CAMERA",
			"probe": map[string]any{"tcp": false}, "endpoints": cameras}},
	}
}

// WriteDropIns writes the drop-ins under dir and returns them.
func WriteDropIns(dir, stateDir string) ([]DropIn, error) {
	reserved, err := ttyReserve()
	if err != nil {
		return nil, err
	}
	ds := dropIns(stateDir, reserved)
	for _, d := range ds {
		if err := d.Write(dir); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// Write writes the drop-in under dir.
func (d DropIn) Write(dir string) error {
	doc := map[string]any{"cdiVersion": "0.1.0", "name": "node test: " + d.Pool(), "type": d.Type, "plugin": d.Plugin, "args": d.Args}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, d.Type+".d", d.ID+".conf"), string(data))
}

// ttyReserve returns the num_system_reserved that leaves the
// ttysOffered highest-numbered /dev/ttyN offered.
func ttyReserve() (int, error) {
	entries, err := os.ReadDir("/dev")
	if err != nil {
		return 0, err
	}
	var ns []int
	for _, e := range entries {
		digits, ok := strings.CutPrefix(e.Name(), "tty")
		if n, err := strconv.Atoi(digits); ok && err == nil && strconv.Itoa(n) == digits {
			ns = append(ns, n)
		}
	}
	if len(ns) <= ttysOffered {
		return 0, fmt.Errorf("%w: the node offers %d of /dev/ttyN, and this machine has %d", ErrUnavailable, ttysOffered, len(ns))
	}
	slices.Sort(ns)
	return ns[len(ns)-ttysOffered-1], nil
}

// daemonSetArgs returns the bridge container's args in the DaemonSet at
// path.
func daemonSetArgs(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "bridge" {
			return c.Args, nil
		}
	}
	return nil, fmt.Errorf("%s: no container named bridge", path)
}

var unresolved = regexp.MustCompile(`\$\([A-Z_]+\)`)

// withFlags replaces the value of each --name=value in args that set
// names, keeping the order, and appends the flags args lacks. Every
// $(VAR) must have been replaced.
func withFlags(args []string, set map[string]string) ([]string, error) {
	out := make([]string, 0, len(args)+len(set))
	done := map[string]bool{}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if v, ok := set[name]; ok {
			a, done[name] = "--"+name+"="+v, true
		}
		if unresolved.MatchString(a) {
			return nil, fmt.Errorf("the DaemonSet's argument %q is not set for a process", a)
		}
		out = append(out, a)
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if !done[name] {
			out = append(out, "--"+name+"="+set[name])
		}
	}
	return out, nil
}

// waitBridgeReady waits until the bridge's /readyz answers 200: its first
// discovery has been published to the kubelet.
func waitBridgeReady(ctx context.Context, bridge *Proc) error {
	return waitReadyAt(ctx, bridge, bridgeReadyz)
}

// waitReadyAt is waitBridgeReady for a bridge whose /readyz is readyz.
func waitReadyAt(ctx context.Context, bridge *Proc, readyz string) error {
	ctx, cancel := context.WithTimeout(ctx, bridgeReadyWait)
	defer cancel()
	last := "no answer"
	for ctx.Err() == nil {
		if exited, how := bridge.Exited(); exited {
			return fmt.Errorf("cdi-bridge exited (%s); its log ends:\n%s", how, bridge.Tail(logTail))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("cdi-bridge not ready within %v (%s: %s); its log ends:\n%s", bridgeReadyWait, readyz, last, bridge.Tail(logTail))
}

// StartBridge starts cdi-bridge as the DaemonSet runs it, but as a process
// with the test's drop-ins, plugins and credentials, and quick reclaim;
// extra sets flags beyond those (--dra-pools, say).
func StartBridge(t testing.TB, l Layout, c *Cluster, node, confDir string, extra map[string]string) *Proc {
	t.Helper()
	p := startBridgeProc(t, l, c, node, confDir, "cdi-bridge", extra)
	if err := waitBridgeReady(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// startBridgeProc starts the bridge as StartBridge does, its log named
// name, and does not wait for it.
func startBridgeProc(t testing.TB, l Layout, c *Cluster, node, confDir, name string, extra map[string]string) *Proc {
	t.Helper()
	args, err := daemonSetArgs(filepath.Join(l.Repo, deployDir, "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{
		"node-name": node, "namespace": c.Namespace, "kubeconfig": c.BridgeKubeconfig,
		"conf-dir": confDir, "plugin-path": l.Bin,
		"reclaim-grace": reclaimGrace.String(), "reclaim-period": reclaimPeriod.String(),
		// The node's own, as the DaemonSet's is the host's: the bridges of
		// one node share it, those of two never.
		"node-lock": l.Path("cdi-state", "node.lock"),
	}
	maps.Copy(set, extra)
	args, err = withFlags(args, set)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the bridge's own cleanup, so run after it: once
	// the bridge has stopped.
	var p *Proc
	t.Cleanup(func() {
		if p != nil {
			checkNotForbidden(t, p.LogPath)
		}
	})
	return StartProc(t, l, name, nil, append([]string{filepath.Join(l.Bin, "cdi-bridge")}, args...)...)
}

// checkNotForbidden fails the test for every line of the bridge's log in
// which the API server refused it something: the shipped RBAC must grant
// all the bridge does, leader election included, which no other check
// would notice.
func checkNotForbidden(t testing.TB, log string) {
	data, err := os.ReadFile(log)
	if err != nil {
		t.Error(err)
		return
	}
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, "forbidden") {
			t.Errorf("the bridge was refused by RBAC: %s", strings.TrimSpace(line))
		}
	}
}

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// The lines of cdi-bridge's log that mark the steps of its start; the
// bench reads their times.
const (
	msgStoreSynced = "instance store synced"
	msgDiscovering = "discovering devices"
	msgHandOff     = "the first discovery's DRA pools"
	msgObserved    = "the first discovery's DRA pools recorded in the Instance store"
	msgRebuilt     = "prepared claims rebuilt from the kubelet, the API server and the plugins"
	msgHanded      = "the first discovery's DRA pools handed to the slice controller"
	msgController  = "the slice controller started"
)

// draStartSample is one start of the bridge, as its log and a watch of
// its node's slices timed it, and the floor of its round.
type draStartSample struct {
	// begun is when the bridge started its slice controller (the log's
	// msgController less its took); controller when that start returned.
	begun, controller time.Time
	// The log's times of msgStoreSynced, msgDiscovering, msgHandOff
	// (the first discovery handed to the front end) and msgHanded (its
	// slices handed to the controller, after the rebuild and the kubelet
	// plugin's start).
	storeSynced, discovering, handOff, handed time.Time
	// observed and rebuilt are the log's times of msgObserved (the store
	// told of the pools' shared devices, beside the rebuild and the
	// publish) and msgRebuilt (between the hand-off and handed).
	observed, rebuilt time.Time
	// inAPI is when the watch showed the pool complete.
	inAPI time.Time
	// floor is the same slices written with the typed client, from the
	// first create until the watch showed them.
	floor time.Duration
}

// wait is what the node's devices waited: from the first discovery's
// hand-off to the front end until its slices were in the API.
func (x draStartSample) wait() time.Duration { return x.inAPI.Sub(x.handOff) }

// draStartRun is BenchmarkDRAStart's measurement.
type draStartRun struct {
	o       draOptions
	size    storedSize // the bridge's slices, in the first round
	samples []draStartSample
	load    [2]string
}

// BenchmarkDRAStart measures the first publish as the bridge makes it:
// the cdi-bridge binary with --dra-pools, the kube store and the real
// generic-tty plugin over -dra-devices terminals (empty files under a
// root of the bench's own), started against an etcd and kube-apiserver
// of its own, timed from its log and a watch of its node's slices;
// against the floor, the same slices created with the typed client in
// the same round. -dra-rounds rounds, the subjects' order alternating.
// Run it with -benchtime 1x.
func BenchmarkDRAStart(b *testing.B) {
	o := draOptions{devices: *flagDRADevices, rounds: *flagDRARounds}
	if o.devices < 1 || o.rounds < 1 {
		b.Fatal("-dra-devices and -dra-rounds must be at least 1")
	}
	env := apitest.StartWithInstances(b, apitest.Options{})
	bin := buildBridge(b)
	var run *draStartRun
	for b.Loop() {
		var err error
		if run, err = measureDRAStart(b.Context(), env, env.Kubeconfig(b, apitest.AdminUser), bin, o, os.Stderr); err != nil {
			b.Fatal(err)
		}
	}
	run.print(os.Stdout)
	run.report(b)
}

// TestDRAStart runs the start measurement briefly, small, so that it
// cannot rot: the log lines it times the bridge by are still written.
func TestDRAStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bridge and starts an API server")
	}
	env := apitest.StartWithInstances(t, apitest.Options{})
	bin := buildBridge(t)
	run, err := measureDRAStart(t.Context(), env, env.Kubeconfig(t, apitest.AdminUser), bin, draOptions{devices: 100, rounds: 1}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	run.print(&out)
	for _, want := range []string{"100 devices", "the first discovery", "typed client alone (floor)", "the library's start"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

// buildBridge builds cdi-bridge and the plugins into a directory of the
// benchmark's.
func buildBridge(tb testing.TB) string {
	tb.Helper()
	root, err := exectest.ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	bin := tb.TempDir()
	if err := build(tb.Context(), root, bin); err != nil {
		tb.Fatal(err)
	}
	return bin
}

// measureDRAStart runs o.rounds rounds of a bridge start and the floor.
func measureDRAStart(ctx context.Context, env *apitest.Env, kubeconfig, bin string, o draOptions, log io.Writer) (*draStartRun, error) {
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	floorClient, err := countedClient(env.Config, "cdi-bench-dra-start-floor", &requestCounter{})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	run := &draStartRun{o: o, load: [2]string{loadAverage()}}
	var devices []resourceslice.Slice // the first bridge's, which the floors write
	var size storedSize
	for r := range o.rounds {
		fmt.Fprintf(log, "DRA start bench: round %d of %d, %d devices\n", r+1, o.rounds, o.devices)
		var x draStartSample
		bridge := func() error {
			var err error
			x, devices, size, err = startDRABridge(ctx, admin, kubeconfig, bin, fmt.Sprintf("dra-start-%d", r), o.devices)
			return err
		}
		floor := func() (err error) {
			x.floor, err = draStartFloor(ctx, admin, floorClient, fmt.Sprintf("dra-start-floor-%d", r), devices)
			return err
		}
		steps := []func() error{bridge, floor}
		if r%2 == 1 {
			steps = []func() error{floor, bridge}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return nil, fmt.Errorf("round %d: %w", r+1, err)
			}
		}
		if r == 0 {
			run.size = size
		}
		run.samples = append(run.samples, x)
	}
	run.load[1] = loadAverage()
	return run, nil
}

// startDRABridge starts cdi-bridge as node serving n terminals through
// DRA, waits until its slices are in the API, stops it, and returns its
// start's times, its slices and their size.
func startDRABridge(ctx context.Context, admin kubernetes.Interface, kubeconfig, bin, node string, n int) (draStartSample, []resourceslice.Slice, storedSize, error) {
	dir, err := os.MkdirTemp("", "cdis")
	if err != nil {
		return draStartSample{}, nil, storedSize{}, fmt.Errorf("bridge directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := ttyRoot(dir, n); err != nil {
		return draStartSample{}, nil, storedSize{}, err
	}
	// The kubelet's registration directory, which the kubelet makes.
	if err := os.Mkdir(filepath.Join(dir, "reg"), 0o700); err != nil {
		return draStartSample{}, nil, storedSize{}, fmt.Errorf("registration directory: %w", err)
	}
	s, err := newWatchedNode(ctx, admin, node)
	if err != nil {
		return draStartSample{}, nil, storedSize{}, err
	}
	defer s.close(ctx, admin)
	logPath := filepath.Join(dir, "cdi-bridge.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return draStartSample{}, nil, storedSize{}, fmt.Errorf("bridge log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "cdi-bridge"), "--conf-dir", filepath.Join(dir, "conf"), "--plugin-path", bin,
		"--node-name", node, "--device-plugin-dir", filepath.Join(dir, "dp"), "--domain", draDriver, "--store", "kube",
		"--kubeconfig", kubeconfig, "--namespace", "default", "--leader-election-lease", "", "--pod-resources-socket", "",
		"--metrics-address", "", "--cdi-spec-dir", filepath.Join(dir, "cdi"), "--dra-pools", ttyPool,
		"--dra-checkpoint", filepath.Join(dir, "claims.json"), "--dra-plugin-dir", filepath.Join(dir, "dra"),
		"--dra-registrar-dir", filepath.Join(dir, "reg"))
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return draStartSample{}, nil, storedSize{}, fmt.Errorf("starting cdi-bridge: %w", err)
	}
	at, werr := s.watch.untilComplete(ctx, n)
	if werr == nil {
		// On a fresh node the controller starts after the first slices;
		// the store is told of the pool beside the publish.
		werr = errors.Join(untilLogged(ctx, logPath, msgController), untilLogged(ctx, logPath, msgObserved))
	}
	_, serr := stopBridge(cmd)
	if err := errors.Join(werr, serr); err != nil {
		log, _ := os.ReadFile(logPath)
		return draStartSample{}, nil, storedSize{}, fmt.Errorf("%w; cdi-bridge's log:\n%s", err, log)
	}
	x, err := readStartLog(logPath)
	x.inAPI = at
	var devices []resourceslice.Slice
	for _, sl := range s.watch.current() {
		devices = append(devices, resourceslice.Slice{Devices: sl.Spec.Devices})
	}
	size, serr := s.watch.size()
	return x, devices, size, errors.Join(err, serr)
}

// ttyRoot makes a generic-tty drop-in in dir/conf over n terminals,
// empty files in dir/root/dev, tty100 on.
func ttyRoot(dir string, n int) error {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return fmt.Errorf("terminals' root: %w", err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(root, "dev", ttyName(i)), nil, 0o644); err != nil {
			return fmt.Errorf("terminals' root: %w", err)
		}
	}
	return writeDropIn(filepath.Join(dir, "conf"), "tty.d/generic.conf", map[string]any{"cdiVersion": "0.1.0", "name": "dra start",
		"type": "tty", "plugin": "generic-tty", "args": map[string]any{"root": root,
			"stateDir": filepath.Join(dir, "state"), "num_system_reserved": 40, "capacity": 1}})
}

// newWatchedNode creates node, as the kubelet would have, and watches its
// slices; close deletes them and it.
func newWatchedNode(ctx context.Context, admin kubernetes.Interface, node string) (*draSubject, error) {
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating node %s: %w", node, err)
	}
	s := &draSubject{node: node}
	var err error
	if s.watch, err = watchSlices(ctx, admin, node); err != nil {
		return nil, errors.Join(err, s.close(ctx, admin))
	}
	return s, nil
}

// draStartFloor creates devices' slices on a node of its own with the
// typed client, a create each, and returns how long until the watch
// showed them.
func draStartFloor(ctx context.Context, admin, client kubernetes.Interface, node string, devices []resourceslice.Slice) (time.Duration, error) {
	s, err := newWatchedNode(ctx, admin, node)
	if err != nil {
		return 0, err
	}
	defer s.close(ctx, admin)
	n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("reading node %s: %w", node, err)
	}
	f := &floorPublisher{client: client, node: n, pool: ttyPool}
	start := time.Now()
	if err := f.create(ctx, devices); err != nil {
		return 0, err
	}
	at, err := s.watch.until(ctx, devices)
	return at.Sub(start), err
}

// readStartLog reads the times of the start's steps from the bridge's
// JSON log.
func readStartLog(path string) (draStartSample, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return draStartSample{}, fmt.Errorf("bridge log: %w", err)
	}
	marks := map[string]time.Time{}
	var took time.Duration
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Took string    `json:"took"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue // klog's lines, whatever they are
		}
		if _, seen := marks[line.Msg]; !seen {
			marks[line.Msg] = line.Time
		}
		if line.Msg == msgController {
			if took, err = time.ParseDuration(line.Took); err != nil {
				return draStartSample{}, fmt.Errorf("bridge log: %q: %w", msgController, err)
			}
		}
	}
	for _, m := range []string{msgStoreSynced, msgDiscovering, msgHandOff, msgObserved, msgRebuilt, msgHanded, msgController} {
		if marks[m].IsZero() {
			return draStartSample{}, fmt.Errorf("bridge log: no line %q:\n%s", m, data)
		}
	}
	return draStartSample{begun: marks[msgController].Add(-took), controller: marks[msgController],
		storeSynced: marks[msgStoreSynced], discovering: marks[msgDiscovering], handOff: marks[msgHandOff],
		handed: marks[msgHanded], observed: marks[msgObserved], rebuilt: marks[msgRebuilt]}, nil
}

// waited is when the slices stopped waiting for the library's start:
// when it returned, or the hand-off to the controller if the slices
// were in the API before it returned (a fresh node's first slices are
// written before the controller starts).
func (x draStartSample) waited() time.Time {
	if x.controller.Before(x.inAPI) {
		return x.controller
	}
	return x.handed
}

// untilLogged waits until the bridge's log at path has a line of msg.
func untilLogged(ctx context.Context, path, msg string) error {
	line := []byte(`"msg":"` + msg + `"`)
	err := kwait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(path)
		return bytes.Contains(data, line), err
	})
	if err != nil {
		return fmt.Errorf("bridge log: no line %q: %w", msg, err)
	}
	return nil
}

// draStartPart is one part of the bridge's start, for the table.
type draStartPart struct {
	name string
	of   func(draStartSample) time.Duration
}

func draStartParts() []draStartPart {
	return []draStartPart{
		{"opening the Instance store (from the controller's start; it lists no pool yet)", func(x draStartSample) time.Duration { return x.storeSynced.Sub(x.begun) }},
		{"the rest of the wiring, until discovery starts", func(x draStartSample) time.Duration { return x.discovering.Sub(x.storeSynced) }},
		{"the first discovery (generic-tty's INFO), until its hand-off", func(x draStartSample) time.Duration { return x.handOff.Sub(x.discovering) }},
		{"the rebuild of the prepared claims (ResourceClaims listed)", func(x draStartSample) time.Duration { return x.rebuilt.Sub(x.handOff) }},
		{"the kubelet plugin's start", func(x draStartSample) time.Duration { return x.handed.Sub(x.rebuilt) }},
		{"then waiting for the library's start", func(x draStartSample) time.Duration { return max(0, x.waited().Sub(x.handed)) }},
		{"then the writes, until the API showed the slices", func(x draStartSample) time.Duration { return x.inAPI.Sub(later(x.handed, x.waited())) }},
	}
}

// medianOf is the median over the samples of one figure.
func (run *draStartRun) medianOf(of func(draStartSample) time.Duration) time.Duration {
	d := make([]time.Duration, len(run.samples))
	for i, x := range run.samples {
		d[i] = of(x)
	}
	return percentile(d, 50)
}

func (run *draStartRun) print(w io.Writer) {
	wait, floor := run.medianOf(draStartSample.wait), run.medianOf(func(x draStartSample) time.Duration { return x.floor })
	whole := run.medianOf(func(x draStartSample) time.Duration { return x.inAPI.Sub(x.begun) })
	fmt.Fprintf(w, "\nDRA first publish as the bridge makes it: cdi-bridge with --dra-pools %s over generic-tty, %d devices\n", ttyPool, run.o.devices)
	fmt.Fprintf(w, "(terminals, capacity 1) in %d slices (%s KB as JSON), the kube store, against a real kube-apiserver; medians of %d starts,\n",
		run.size.slices, kb(int64(run.size.json)), run.o.rounds)
	fmt.Fprintf(w, "each on a Node of its own, the floor's order alternating; the machine's load average (1 min) %s before, %s after\n", run.load[0], run.load[1])
	tw := newTable(w)
	fmt.Fprintln(tw, "what\tms\tx floor\tverdict")
	fmt.Fprintf(tw, "the first discovery's hand-off to the front end until its slices were in the API\t%s\t%s\t%s\n", ms(wait),
		ratio(float64(wait), float64(floor)), judge(wait <= 2*floor, "more than 2x the floor"))
	fmt.Fprintf(tw, "typed client alone (floor): the same slices, a create each, until the API showed them\t%s\t1\t-\n", ms(floor))
	fmt.Fprintf(tw, "the whole start, from the slice controller's start until the slices were in the API\t%s\t%s\t-\n", ms(whole), ratio(float64(whole), float64(floor)))
	for _, p := range draStartParts() {
		fmt.Fprintf(tw, "  %s\t%s\t\t\n", p.name, ms(run.medianOf(p.of)))
	}
	fmt.Fprintf(tw, "the library's start (resourceslice.StartController), beside the above\t%s\t\t\n",
		ms(run.medianOf(func(x draStartSample) time.Duration { return x.controller.Sub(x.begun) })))
	fmt.Fprintf(tw, "the store told of the pool (Observe: the pool's first list), from the hand-off, beside the above\t%s\t\t\n",
		ms(run.medianOf(func(x draStartSample) time.Duration { return x.observed.Sub(x.handOff) })))
	tw.Flush()
	fmt.Fprintln(w, "Times from the bridge's JSON log (its lines' times) and a watch of the node's slices (another client), on one clock.")
	fmt.Fprintln(w, "The floor's client is one for all rounds, its connection open, as the bridge's is by its first publish; the bridge's rate limit.")
	fmt.Fprintln(w, "The parts are medians each, and need not add up to the whole's median.")
}

// report gives go test's benchmark line the main figures.
func (run *draStartRun) report(b *testing.B) {
	wait, floor := run.medianOf(draStartSample.wait), run.medianOf(func(x draStartSample) time.Duration { return x.floor })
	b.ReportMetric(float64(wait)/1e6, "first-slices-ms")
	b.ReportMetric(float64(floor)/1e6, "floor-ms")
	b.ReportMetric(float64(wait)/float64(floor), "first-slices-x-floor")
}

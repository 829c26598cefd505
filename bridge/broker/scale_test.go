package broker

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

var flagScaleDevices = flag.Int("broker-devices", 1000, "devices the one Broker of BenchmarkBrokers selects")

// scaleWait bounds the waits of the scale measurement: 1,000 Jobs at 50
// requests a second take 20 s.
const scaleWait = 5 * time.Minute

// scaleRun is one measurement of a Broker selecting many devices.
type scaleRun struct {
	devices int
	// floor is the same Jobs made with the typed client alone, at the
	// controller's client's rate limit; made, from the Broker's creation
	// until its status shows every Job Active; firstLook, from a new
	// controller's start until it has looked at the Broker.
	floor, made, firstLook time.Duration
	// writes by "METHOD resource", of the floor, the controller until it
	// settled, and a new controller.
	floorWrites, madeWrites, restartWrites map[string]int
	// brokerBytes is the Broker object's size as JSON, with its status.
	brokerBytes int
	load        [2]string
}

// scaleRig is an API server with the Broker, Instance and Presence CRDs,
// n shared cameras that node n1 sees, and the leader's store of every
// pool.
type scaleRig struct {
	env     *apitest.Env
	dyn     dynamic.Interface
	leader  *kube.Store
	ns      string
	devices []Device
}

func startScaleRig(tb testing.TB, n int) *scaleRig {
	tb.Helper()
	env := apitest.StartWithInstances(tb, apitest.Options{})
	crd, err := apitest.RepoFile(brokerCRD)
	if err == nil {
		err = apitest.InstallCRD(tb.Context(), env.Config, crd)
	}
	if err != nil {
		tb.Fatal(err)
	}
	r := &scaleRig{env: env, ns: env.Namespace(tb)}
	if r.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		tb.Fatal(err)
	}
	seen := make([]instance.Instance, n)
	for i := range seen {
		id := fmt.Sprintf("cam-%05d", i)
		seen[i] = instance.Instance{Name: instance.Name(testPool, id, "", true), Config: testPool, DeviceID: id, Shared: true, Capacity: 2}
	}
	node, err := kube.New(tb.Context(), r.dyn, r.ns, kube.ServedPools)
	if err == nil {
		err = node.Observe(tb.Context(), "n1", testPool, seen)
	}
	if err == nil {
		r.leader, err = kube.New(tb.Context(), r.dyn, r.ns, kube.AllPools)
	}
	if err != nil {
		tb.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(tb.Context(), 100*time.Millisecond, scaleWait, true, func(ctx context.Context) (bool, error) {
		all, err := r.leader.List(ctx)
		r.devices = fromInstances(all, "cdi.local", nil)[testPool]
		return err == nil && len(r.devices) == n, nil
	})
	if err != nil {
		tb.Fatalf("the leader's store never showed the %d cameras: %v", n, err)
	}
	return r
}

// measureScale measures one Broker over every camera of the rig.
func measureScale(tb testing.TB, r *scaleRig, progress io.Writer) *scaleRun {
	tb.Helper()
	run := &scaleRun{devices: len(r.devices), load: [2]string{loadAverage(), ""}}
	fmt.Fprintf(progress, "brokers: %d Jobs with the typed client alone\n", len(r.devices))
	run.floor, run.floorWrites = r.floorJobs(tb)
	counter := &writeCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(r.env.Config)
	cfg.QPS, cfg.Burst = kube.ClientQPS, kube.ClientBurst
	cfg.Wrap(counter.wrap)
	l := &looks{}
	key := r.ns + "/inventory"
	stop := startController(tb, cfg, r.leader, []string{r.ns}, nil, func(c *Controller) { c.afterLook = l.hook })
	fmt.Fprintf(progress, "brokers: a Broker over %d cameras\n", len(r.devices))
	start := time.Now()
	r.createBroker(tb, jobsBroker("inventory", 60))
	r.waitActive(tb, len(r.devices))
	run.made = time.Since(start)
	r.waitSettled(tb, l, key)
	run.madeWrites = counter.take()
	stop()
	fmt.Fprintln(progress, "brokers: a new leader")
	l = &looks{}
	first := make(chan time.Time, 1)
	start = time.Now()
	startController(tb, cfg, r.leader, []string{r.ns}, nil, func(c *Controller) {
		c.afterLook = func(k string, err error) {
			select {
			case first <- time.Now():
			default:
			}
			l.hook(k, err)
		}
	})
	r.waitSettled(tb, l, key)
	run.firstLook = (<-first).Sub(start)
	run.restartWrites = counter.take()
	obj, err := r.dyn.Resource(Resource).Namespace(r.ns).Get(tb.Context(), "inventory", metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	data, _ := json.Marshal(obj.Object)
	run.brokerBytes, run.load[1] = len(data), loadAverage()
	return run
}

// floorJobs makes, in a namespace of its own, the Jobs the controller
// would, one create each with a typed client at the controller's rate
// limit, and returns how long that took and its writes.
func (r *scaleRig) floorJobs(tb testing.TB) (time.Duration, map[string]int) {
	tb.Helper()
	counter := &writeCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(r.env.Config)
	cfg.QPS, cfg.Burst = kube.ClientQPS, kube.ClientBurst
	cfg.Wrap(counter.wrap)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ns := r.env.Namespace(tb)
	br := jobsBroker("inventory", 60)
	br.Namespace, br.UID, br.Generation = ns, "floor", 1
	p := planner{builder: builder{domain: "cdi.local"}}
	var jobs []*batchv1.Job
	for _, u := range p.units(br, r.devices) {
		jobs = append(jobs, p.job(br, u))
	}
	start := time.Now()
	for _, j := range jobs {
		if _, err := client.BatchV1().Jobs(ns).Create(tb.Context(), j, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(start), counter.take()
}

func (r *scaleRig) createBroker(tb testing.TB, br *Broker) {
	tb.Helper()
	br.APIVersion, br.Kind = Resource.GroupVersion().String(), Kind
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(br)
	if err != nil {
		tb.Fatal(err)
	}
	delete(obj, "status")
	if _, err := r.dyn.Resource(Resource).Namespace(r.ns).Create(tb.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// waitActive waits until the Broker's status shows n Jobs Active.
func (r *scaleRig) waitActive(tb testing.TB, n int) {
	tb.Helper()
	err := wait.PollUntilContextTimeout(tb.Context(), 200*time.Millisecond, scaleWait, true, func(ctx context.Context) (bool, error) {
		u, err := r.dyn.Resource(Resource).Namespace(r.ns).Get(ctx, "inventory", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		active, _, _ := unstructured.NestedInt64(u.Object, "status", "active")
		return active == int64(n), nil
	})
	if err != nil {
		tb.Fatalf("the Broker never showed %d Jobs Active: %v", n, err)
	}
}

// waitSettled waits until the controller has looked at the Broker twice
// (its own look, then the one its informers' events queue) and not for a
// while since.
func (r *scaleRig) waitSettled(tb testing.TB, l *looks, key string) {
	tb.Helper()
	err := wait.PollUntilContextTimeout(tb.Context(), 100*time.Millisecond, scaleWait, true, func(context.Context) (bool, error) {
		return l.settled([]string{key}, 2, 3*workloadSettle), nil
	})
	if err != nil {
		tb.Fatalf("the controller never settled: %v", err)
	}
}

// loadAverage is the machine's over the last minute, or "?".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// writesText lists writes as "POST jobs 1000, PUT brokers/status 2".
func writesText(w map[string]int) string {
	if len(w) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(w)) {
		out = append(out, fmt.Sprintf("%s %d", k, w[k]))
	}
	return strings.Join(out, ", ")
}

func (run *scaleRun) print(w io.Writer) {
	fmt.Fprintf(w, "\nBrokers: one Broker of a Job per device selecting %d shared cameras (the leader's kube.Store of every pool; no pods); "+
		"the controller's client and the floor's at %d requests a second, bursts of %d; load average %s to %s\n\n",
		run.devices, kube.ClientQPS, kube.ClientBurst, run.load[0], run.load[1])
	fmt.Fprintln(w, "| step | subject | took | x floor | writes |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	fmt.Fprintf(w, "| %d Jobs made | controller: Broker created until its status shows every Job Active | %.1f s | %.2f | %s |\n",
		run.devices, run.made.Seconds(), run.made.Seconds()/run.floor.Seconds(), writesText(run.madeWrites))
	fmt.Fprintf(w, "| | typed client alone, one create each (floor) | %.1f s | 1 | %s |\n", run.floor.Seconds(), writesText(run.floorWrites))
	fmt.Fprintf(w, "| a new leader | controller: start until its first look | %.1f s | | %s |\n", run.firstLook.Seconds(), writesText(run.restartWrites))
	fmt.Fprintf(w, "\nThe Broker with its status: %.1f KB as JSON.\n", float64(run.brokerBytes)/1024)
}

// BenchmarkBrokers measures one Broker over -broker-devices cameras
// against a real kube-apiserver (no controller-manager, so no pods): the
// Jobs made, one write each, against the same creates alone; and a new
// leader's look, which writes nothing. It is one operation: run it with
// -benchtime 1x.
func BenchmarkBrokers(b *testing.B) {
	r := startScaleRig(b, *flagScaleDevices)
	var run *scaleRun
	for b.Loop() {
		run = measureScale(b, r, os.Stderr)
	}
	run.print(os.Stdout)
	b.ReportMetric(run.made.Seconds()/run.floor.Seconds(), "x-floor")
}

// TestScale runs the measurement small: a Job per device is one write
// each, the status a few, and a new leader writes nothing.
func TestScale(t *testing.T) {
	const n = 60
	run := measureScale(t, startScaleRig(t, n), t.Output())
	run.print(t.Output())
	if got := run.madeWrites["POST jobs"]; got != n {
		t.Errorf("%d Jobs made with %d creates, want one each", n, got)
	}
	if others := len(run.madeWrites) - 1; others != 1 || run.madeWrites["PUT brokers/status"] > 3 {
		t.Errorf("writes %v, want the creates and a few status writes", run.madeWrites)
	}
	if len(run.restartWrites) != 0 {
		t.Errorf("a new leader wrote %v, want nothing", run.restartWrites)
	}
}

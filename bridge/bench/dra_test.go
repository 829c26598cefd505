package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/spec"
)

// draSettle is how long a step's requests are still counted after the
// API showed its slices: a write that comes later is the step's too.
const draSettle = time.Second

// draOptions size the DRA publish measurement.
type draOptions struct {
	devices int // in the one pool
	rounds  int // of every step of both subjects
}

// draStep is one row group of the DRA table: the first publish, then a
// republish after one more change to one device.
type draStep struct {
	name   string
	change func(*spec.DeviceInfo) // nil for the first publish
}

func draSteps() []draStep {
	return []draStep{
		{"first publish, a fresh node (written ahead of the controller)", nil},
		{"republish, one property changed", newFirmware},
		{"republish, one device unhealthy", unhealthy},
	}
}

// draSample is one step of one subject in one round.
type draSample struct {
	took     time.Duration // from the call until the watch showed the slices
	returned time.Duration // the call alone
	reqs     requestCounts
	ctrl     resourceslice.Stats // the library controller's own counts; zero for the floor
	// generation is the pool's as the API showed it complete: the
	// library starts a new one when a change needs more than one write.
	generation int64
}

// draRun is one DRA measurement: its samples, [subject][step][round].
type draRun struct {
	o       draOptions
	samples [2][][]draSample
	size    [2]storedSize // after the first publish
	// load is the machine's load average over the last minute, as
	// /proc/loadavg says, before the first round and after the last.
	load [2]string
	// ahead is, each round, how long before its first publish the
	// library's controller was started, with its front end.
	ahead []time.Duration
}

// draSubjectName is the table's name of subject i: the library first,
// then the floor.
func draSubjectName(i int) string {
	if i == 0 {
		return "library controller"
	}
	return "typed client alone (floor)"
}

// BenchmarkDRAPublish measures the DRA front end's ResourceSlice
// publishing against a real kube-apiserver, each figure against a floor
// measured in the same run (see doc.go). Like BenchmarkBridge it is one
// operation that runs its own rounds: run it with -benchtime 1x.
func BenchmarkDRAPublish(b *testing.B) {
	o := draOptions{devices: *flagDRADevices, rounds: *flagDRARounds}
	if o.devices <= draChanged || o.rounds < 1 {
		b.Fatalf("-dra-devices must be more than %d (the device the republishes change) and -dra-rounds at least 1", draChanged)
	}
	env := apitest.Start(b, apitest.Options{})
	var run *draRun
	for b.Loop() {
		var err error
		if run, err = measureDRA(b.Context(), env.Config, o, os.Stderr); err != nil {
			b.Fatal(err)
		}
	}
	run.print(os.Stdout)
	run.report(b)
}

// TestDRAPublish runs the DRA measurement briefly, small, so that it
// cannot rot.
func TestDRAPublish(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server")
	}
	env := apitest.Start(t, apitest.Options{})
	run, err := measureDRA(t.Context(), env.Config, draOptions{devices: 300, rounds: 1}, t.Output())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	run.print(&out)
	for _, want := range append([]string{draSubjectName(0), draSubjectName(1)}, "300 devices", "republish, one device unhealthy", "stored") {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

// measureDRA runs o.rounds rounds, each with a node of its own for each
// subject, the subjects' steps interleaved so that a machine that slows
// down shifts both alike.
func measureDRA(ctx context.Context, cfg *rest.Config, o draOptions, log io.Writer) (*draRun, error) {
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	run := &draRun{o: o}
	for i := range run.samples {
		run.samples[i] = make([][]draSample, len(draSteps()))
	}
	run.load[0] = loadAverage()
	for r := range o.rounds {
		fmt.Fprintf(log, "DRA bench: round %d of %d, %d devices\n", r+1, o.rounds, o.devices)
		if err := run.round(ctx, cfg, admin, r); err != nil {
			return nil, fmt.Errorf("round %d: %w", r+1, err)
		}
	}
	run.load[1] = loadAverage()
	return run, nil
}

// loadAverage is the first figure of /proc/loadavg, or "?" where there
// is none: the table says how busy the machine was.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// round measures every step of both subjects once.
func (run *draRun) round(ctx context.Context, cfg *rest.Config, admin kubernetes.Interface, r int) (err error) {
	var subjects [2]*draSubject
	defer func() {
		for _, s := range subjects {
			if s != nil {
				err = errors.Join(err, s.close(ctx, admin))
			}
		}
	}()
	for i := range subjects {
		node := fmt.Sprintf("dra-bench-%d-%d", r, i)
		if subjects[i], err = newDRASubject(ctx, cfg, admin, node, i == 0); err != nil {
			return err
		}
	}
	pools := draDiscovery(run.o.devices)
	for step, st := range draSteps() {
		if st.change != nil {
			pools = withDevice(pools, draChanged, st.change)
		}
		for i, s := range subjects {
			x, err := s.measure(ctx, pools)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", draSubjectName(i), st.name, err)
			}
			run.samples[i][step] = append(run.samples[i][step], x)
			if step == 0 && s.lib != nil {
				run.ahead = append(run.ahead, s.lib.first.Sub(s.lib.started))
			}
			if step == 0 && r == 0 {
				if run.size[i], err = s.watch.size(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// draSubject is a publisher on a node of its own, the client it
// publishes with counted, and a watch of its node's slices.
type draSubject struct {
	node    string
	pub     publisher
	lib     *libraryPublisher // nil for the floor
	counter *requestCounter
	watch   *sliceWatch
}

// newDRASubject creates node, as the kubelet would have (the library
// reads its UID for the slices' owner), and starts watching its slices.
func newDRASubject(ctx context.Context, cfg *rest.Config, admin kubernetes.Interface, node string, library bool) (*draSubject, error) {
	n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating node %s: %w", node, err)
	}
	s := &draSubject{node: node, counter: &requestCounter{}}
	client, err := countedClient(cfg, "cdi-bench-dra/"+node, s.counter)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kubernetes client: %w", err), s.close(ctx, admin))
	}
	if library {
		s.lib = startLibraryPublisher(ctx, client, node)
		s.pub = s.lib
	} else {
		s.pub = &floorPublisher{client: client, node: n}
	}
	if s.watch, err = watchSlices(ctx, admin, node); err != nil {
		return nil, errors.Join(err, s.close(ctx, admin))
	}
	return s, nil
}

// measure publishes pools and waits until the API shows them, then
// counts what the step sent until draSettle later.
func (s *draSubject) measure(ctx context.Context, pools []discovery.Pool) (draSample, error) {
	before, stats := s.counter.snapshot(), s.ctrlStats()
	start := time.Now()
	want, err := s.pub.publish(ctx, pools)
	returned := time.Since(start)
	if err != nil {
		return draSample{}, err
	}
	at, err := s.watch.until(ctx, want)
	if err != nil {
		return draSample{}, err
	}
	select {
	case <-ctx.Done():
		return draSample{}, ctx.Err()
	case <-time.After(draSettle):
	}
	after := s.ctrlStats()
	return draSample{took: at.Sub(start), returned: returned, reqs: s.counter.snapshot().since(before),
		generation: s.watch.current()[0].Spec.Pool.Generation,
		ctrl: resourceslice.Stats{NumCreates: after.NumCreates - stats.NumCreates,
			NumUpdates: after.NumUpdates - stats.NumUpdates, NumDeletes: after.NumDeletes - stats.NumDeletes}}, nil
}

func (s *draSubject) ctrlStats() resourceslice.Stats {
	if s.lib == nil {
		return resourceslice.Stats{}
	}
	return s.lib.stats()
}

// close stops the publisher and the watch, and deletes the node's slices
// and the node, so that the next round starts on an API as empty.
func (s *draSubject) close(ctx context.Context, admin kubernetes.Interface) error {
	var errs []error
	if s.pub != nil {
		errs = append(errs, s.pub.stop())
	}
	if s.watch != nil {
		s.watch.stop()
	}
	errs = append(errs, admin.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: nodeSelector(s.node)}))
	errs = append(errs, admin.CoreV1().Nodes().Delete(ctx, s.node, metav1.DeleteOptions{}))
	return errors.Join(errs...)
}

package elected_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/electtest"
)

// Test waits.
const (
	waitLimit  = 20 * time.Second
	pollPeriod = 20 * time.Millisecond
)

// TestCandidate runs elected bridges of several nodes against one real
// API server, each as a user with only the bridge's rights, with jobs
// that record what they are given.
func TestCandidate(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{Users: []apitest.User{{Name: electtest.User}}})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	electtest.Grant(t, admin)
	tests := []struct {
		name string
		run  func(*testing.T, *electtest.Cluster)
	}{
		{"jobs run in the leader alone, on one store, and the next leader's afresh", testJobs},
		{"a bridge without a Node stays out", testNoOwnNode},
		{"a job that stops leaves the others running", testJobStops},
		{"the Lease is held until the jobs have returned", testHeldUntilReturned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, electtest.NewCluster(t, env, admin)) })
	}
}

// testJobs: two bridges with two jobs each. The jobs run in the leader
// alone, both on the one store it opened; they have returned when the
// leader's Run has; the other bridge then opens a store of its own and
// runs its jobs.
func testJobs(t *testing.T, c *electtest.Cluster) {
	c.CreateNodes("a-n1", "a-n2")
	rec := newRecorder()
	stops := map[string]func(){"a-n1": rec.start(c, "a-n1", 2), "a-n2": rec.start(c, "a-n2", 2)}
	first := rec.waitLeader(t, "")
	rec.waitRunning(t, map[string]int{first: 2})
	stops[first]()
	if got := rec.runningNow()[first]; got != 0 {
		t.Fatalf("%d of %s's jobs still run after its Run returned", got, first)
	}
	other := map[string]string{"a-n1": "a-n2", "a-n2": "a-n1"}[first]
	rec.waitRunning(t, map[string]int{other: 2})
	if n := rec.overlapped(); n != 0 {
		t.Errorf("%d jobs started while another bridge's ran", n)
	}
	for _, who := range []string{first, other} {
		if opens, stores := rec.opened(who); opens != 1 || stores != 1 {
			t.Errorf("%s opened %d stores, its jobs were given %d; want one, for both", who, opens, stores)
		}
	}
}

// testNoOwnNode: a bridge whose node has no Node object does not run for
// election: no Lease, no store, no job. Once its Node is created, it
// leads.
func testNoOwnNode(t *testing.T, c *electtest.Cluster) {
	rec := newRecorder()
	rec.start(c, "b-self", 1)
	time.Sleep(2 * electtest.Lease)
	_, err := c.Admin.CoordinationV1().Leases(c.Namespace).Get(t.Context(), elected.DefaultLease, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the Lease of a bridge without a Node: %v, want NotFound", err)
	}
	if opens, _ := rec.opened("b-self"); opens != 0 {
		t.Fatalf("a bridge without a Node opened the store %d times", opens)
	}
	c.CreateNodes("b-self")
	rec.waitRunning(t, map[string]int{"b-self": 1})
}

// testJobStops: of a leader's two jobs, one stops at once with an error;
// the other runs on, and the bridge keeps leading.
func testJobStops(t *testing.T, c *electtest.Cluster) {
	c.CreateNodes("c-n1")
	rec := newRecorder()
	rec.failing = map[string]bool{"job 0": true}
	rec.start(c, "c-n1", 2)
	rec.waitRunning(t, map[string]int{"c-n1": 1})
	for deadline := time.Now().Add(waitLimit); rec.failures() == 0; time.Sleep(pollPeriod) {
		if time.Now().After(deadline) {
			t.Fatal("the failing job never ran")
		}
	}
	time.Sleep(2 * electtest.Lease)
	if got := rec.runningNow(); !maps.Equal(got, map[string]int{"c-n1": 1}) || c.Holder() != "c-n1" {
		t.Fatalf("jobs running %v, Lease held by %q; want c-n1's other job, and c-n1", got, c.Holder())
	}
}

// testHeldUntilReturned: the leader's bridge stops while its job is
// still at work after its context ended (a deletion under way). Until
// the job has returned, the leader keeps renewing the Lease and the other
// bridge runs no job; then the other takes over.
func testHeldUntilReturned(t *testing.T, c *electtest.Cluster) {
	c.CreateNodes("d-n1", "d-n2")
	rec := newRecorder()
	release := make(chan struct{})
	rec.linger = map[string]chan struct{}{"d-n1": release}
	stop := rec.start(c, "d-n1", 1)
	// Before the bridges' own cleanups (the last registered runs first),
	// so that a failing test does not wait on the held job for ever.
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	rec.waitRunning(t, map[string]int{"d-n1": 1})
	rec.start(c, "d-n2", 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	for deadline := time.Now().Add(waitLimit); rec.lingeringNow() == 0; time.Sleep(pollPeriod) {
		if time.Now().After(deadline) {
			t.Fatal("d-n1's job never saw its context end")
		}
	}
	// Renewals by d-n1 after its job's context ended: d-n2 tried to take
	// the Lease at each of them, as often as d-n1 renews.
	renewals := c.Renewals("d-n1", 3, waitLimit)
	if running := rec.runningNow(); renewals < 3 || running["d-n2"] != 0 || rec.overlapped() != 0 {
		t.Fatalf("while d-n1's job was still at work: %d renewals by d-n1 (holder now %q), jobs running %v, %d overlaps",
			renewals, c.Holder(), running, rec.overlapped())
	}
	once.Do(func() { close(release) })
	<-stopped
	rec.waitRunning(t, map[string]int{"d-n2": 1})
	if n := rec.overlapped(); n != 0 {
		t.Errorf("%d jobs started while another bridge's ran", n)
	}
}

// TestNewChecksConfig needs no server: New refuses what leader election
// would, before anything runs.
func TestNewChecksConfig(t *testing.T) {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	open := func(context.Context) (elected.Store, error) { return &fakeStore{}, nil }
	ok := elected.Config{Client: client, OpenStore: open, Node: "n1", Namespace: "cdi-system"}
	tests := []struct {
		name   string
		change func(*elected.Config)
		valid  bool
	}{
		{"defaults", func(*elected.Config) {}, true},
		{"test timing", func(c *elected.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = electtest.Lease, electtest.Renew, electtest.Retry
		}, true},
		{"no client", func(c *elected.Config) { c.Client = nil }, false},
		{"no store", func(c *elected.Config) { c.OpenStore = nil }, false},
		{"no node", func(c *elected.Config) { c.Node = "" }, false},
		{"no namespace", func(c *elected.Config) { c.Namespace = "" }, false},
		{"a nil job", func(c *elected.Config) { c.Jobs = []elected.Job{nil} }, false},
		{"renew deadline past the lease", func(c *elected.Config) { c.RenewDeadline = 20 * time.Second }, false},
		{"retry past the renew deadline", func(c *elected.Config) { c.RetryPeriod = 9 * time.Second }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.change(&cfg)
			_, err := elected.New(cfg)
			if tt.valid != (err == nil) || (err != nil && !errors.Is(err, elected.ErrConfig)) {
				t.Fatalf("New: %v; want valid %v, else ErrConfig", err, tt.valid)
			}
		})
	}
}

// fakeStore is a store no test job reads: each OpenStore makes a new one,
// so that the jobs of one leadership can be told to share it.
type fakeStore struct{ elected.Store }

// recorder keeps what the bridges' jobs and stores do.
type recorder struct {
	mu sync.Mutex
	// running counts, by bridge, its jobs running; opens its OpenStore
	// calls; stores the stores its jobs were given.
	running, opens map[string]int
	stores         map[string]map[elected.Store]bool
	// failing names the jobs that return an error at once; failed counts
	// them.
	failing map[string]bool
	failed  int
	// overlaps counts the jobs started while another bridge's ran: two
	// leaders at once.
	overlaps int
	// linger holds, by bridge, its jobs after their context ends until
	// it is closed; lingering counts those held.
	linger    map[string]chan struct{}
	lingering int
}

func newRecorder() *recorder {
	return &recorder{running: map[string]int{}, opens: map[string]int{}, stores: map[string]map[elected.Store]bool{}}
}

// start runs node's bridge with jobs recording jobs.
func (r *recorder) start(c *electtest.Cluster, node string, jobs int) (stop func()) {
	cfg := elected.Config{OpenStore: func(context.Context) (elected.Store, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.opens[node]++
		return &fakeStore{}, nil
	}}
	for i := range jobs {
		cfg.Jobs = append(cfg.Jobs, &job{name: fmt.Sprintf("job %d", i), who: node, rec: r})
	}
	return c.Start(node, cfg)
}

// job counts itself running, in its bridge, until ctx ends.
type job struct {
	name, who string
	rec       *recorder
}

func (j *job) Name() string { return j.name }

func (j *job) Run(ctx context.Context, store elected.Store) error {
	r := j.rec
	r.mu.Lock()
	if r.stores[j.who] == nil {
		r.stores[j.who] = map[elected.Store]bool{}
	}
	r.stores[j.who][store] = true
	if r.failing[j.name] {
		r.failed++
		r.mu.Unlock()
		return errors.New("failing as told")
	}
	for who, n := range r.running {
		if who != j.who && n > 0 {
			r.overlaps++
		}
	}
	r.running[j.who]++
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	linger := r.linger[j.who]
	if linger != nil {
		r.lingering++
	}
	r.mu.Unlock()
	if linger != nil {
		<-linger
	}
	r.mu.Lock()
	r.running[j.who]--
	r.mu.Unlock()
	return nil
}

// runningNow is, by bridge, how many of its jobs run; bridges running
// none are left out.
func (r *recorder) runningNow() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for who, n := range r.running {
		if n != 0 {
			out[who] = n
		}
	}
	return out
}

// opened is how many stores who opened, and how many its jobs were given.
func (r *recorder) opened(who string) (opens, stores int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opens[who], len(r.stores[who])
}

func (r *recorder) lingeringNow() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lingering
}

func (r *recorder) overlapped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overlaps
}

func (r *recorder) failures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// waitRunning waits until the jobs running, by bridge, are exactly want.
func (r *recorder) waitRunning(t *testing.T, want map[string]int) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !maps.Equal(r.runningNow(), want); time.Sleep(pollPeriod) {
		if time.Now().After(deadline) {
			t.Fatalf("jobs running %v, want %v", r.runningNow(), want)
		}
	}
}

// waitLeader waits until some bridge other than not runs a job, and
// returns it.
func (r *recorder) waitLeader(t *testing.T, not string) string {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); ; time.Sleep(pollPeriod) {
		for who := range r.runningNow() {
			if who != not {
				return who
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bridge but %q runs a job", not)
		}
	}
}

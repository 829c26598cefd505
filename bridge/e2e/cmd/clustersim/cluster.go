package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// simPool is the pool every simulated node sees all of.
const simPool = "camera-shared"

// settle bounds a wait for a store to show what it should, counted from
// the last change it saw.
const settle = 10 * time.Second

// clusterOptions size the multi-node simulation.
type clusterOptions struct {
	nodes, instances int
	claims, capacity int
	inFlight         int // claims under way at once, each by another node
	others           int // Instances of other pools in the scoped phase
	startup          int // new devices of one node's first discovery
}

// check refuses sizes the simulation cannot run: the sweep needs a
// departed node and another to clear it, and claims must find free
// slots (3/4 of the slots at most, so that a node's pick never runs out
// while refused claims leave some slots unclaimed).
func (o clusterOptions) check() error {
	switch {
	case o.nodes == 0:
		return nil
	case o.nodes < 2 || o.instances < 1 || o.capacity < 1 || o.inFlight < 1 || o.claims < 1:
		return errors.New("-sim-nodes must be 0 or at least 2; -sim-instances, -sim-capacity, -sim-inflight and -sim-claims at least 1")
	case o.claims > o.instances*o.capacity*3/4:
		return fmt.Errorf("-sim-claims %d: at most 3/4 of the %d slots", o.claims, o.instances*o.capacity)
	}
	return nil
}

// simNode is one simulated node: a kube store with a client of its own,
// as a node's bridge has.
type simNode struct {
	name  string
	store *kube.Store
	reqs  *requests
	stop  context.CancelFunc // ends its informer: the node is gone
	gone  bool
	// mu makes the node claim one slot at a time, as one bridge's
	// Allocates pick from what its own claims left; held tracks its claims.
	mu   sync.Mutex
	held []instance.Claim
}

// sim is one run of the simulation against one API server.
type sim struct {
	o        clusterOptions
	env      *apitest.Env
	ns       string
	nodes    []*simNode
	devices  []instance.Instance
	http     *http.Client // the admin's, for what no store reads
	res      clusterResult
	progress func(format string, args ...any)
}

// simulate runs the simulation: many nodes' stores share Instances
// through the one API server, which is what a cluster's bridges do.
func simulate(ctx context.Context, o clusterOptions, env *apitest.Env, out io.Writer, progress func(string, ...any)) error {
	if o.nodes == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // every store's informer
	s := &sim{o: o, env: env, progress: progress, res: clusterResult{o: o}}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"starting stores", s.start}, {"setup", s.setup}, {"allocations", s.allocate},
		{"departed-node sweep", s.sweep}, {"release", s.release}, {"scoped", s.scoped}, {"startup", s.startup},
	}
	start := time.Now()
	for _, step := range steps {
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("cluster simulation, %s: %w", step.name, err)
		}
	}
	s.res.took = time.Since(start)
	printCluster(out, s.res)
	return nil
}

// start makes the namespace and the nodes' stores, measuring memory
// before the stores start.
func (s *sim) start(ctx context.Context) error {
	var err error
	if s.http, err = rest.HTTPClientFor(s.env.Config); err != nil {
		return fmt.Errorf("http client: %w", err)
	}
	if s.ns, err = s.env.NewNamespace(ctx, "clustersim-"); err != nil {
		return err
	}
	if s.res.memBefore, err = s.memory(); err != nil {
		return err
	}
	s.progress("cluster: starting %d kube stores, one client each", s.o.nodes)
	for i := range s.o.nodes {
		n, err := startSimNode(ctx, s.env.Config, s.ns, fmt.Sprintf("node-%03d", i))
		if err != nil {
			return err
		}
		s.nodes = append(s.nodes, n)
	}
	s.res.memStarted, err = s.memory()
	return err
}

// startSimNode starts a store the way cdi-bridge does (kube.StartConfig,
// then Synced), with a client of its own whose requests are counted.
func startSimNode(ctx context.Context, cfg *rest.Config, namespace, name string) (*simNode, error) {
	ctx, stop := context.WithCancel(ctx)
	n := &simNode{name: name, reqs: &requests{}, stop: stop}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "cdi-clustersim/" + name
	cfg.Wrap(n.reqs.wrap)
	st, err := kube.StartConfig(ctx, cfg, namespace, kube.ServedPools)
	if err == nil {
		err = st.Synced(ctx)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("kube store for %s: %w", name, err)
	}
	n.store = st
	return n, nil
}

// live are the nodes whose stores still run.
func (s *sim) live() []*simNode {
	var out []*simNode
	for _, n := range s.nodes {
		if !n.gone {
			out = append(out, n)
		}
	}
	return out
}

func storesOf(nodes []*simNode) []*kube.Store {
	out := make([]*kube.Store, len(nodes))
	for i, n := range nodes {
		out[i] = n.store
	}
	return out
}

// load is what the nodes asked of the API server over one phase, and
// the CPU time it cost.
type load struct {
	writes, conflicts int
	reqs              requestCounts
	cpu               cpuTimes
	// closed are watchers the API server closed as unresponsive.
	closed int
}

// load sums every node's counts so far, the gone ones' included.
func (s *sim) load(ctx context.Context) (load, error) {
	var l load
	for _, n := range s.nodes {
		st := n.store.Stats()
		l.writes += st.Writes
		l.conflicts += st.Conflicts
		l.reqs = l.reqs.add(n.reqs.snapshot())
	}
	var err error
	if l.cpu, err = s.cpu(); err != nil {
		return l, err
	}
	l.closed, err = s.closedWatchers(ctx)
	return l, err
}

func (l load) sub(m load) load {
	return load{writes: l.writes - m.writes, conflicts: l.conflicts - m.conflicts, reqs: l.reqs.sub(m.reqs),
		cpu:    cpuTimes{apiserver: l.cpu.apiserver - m.cpu.apiserver, etcd: l.cpu.etcd - m.cpu.etcd, bench: l.cpu.bench - m.cpu.bench},
		closed: l.closed - m.closed}
}

// measure runs phase and returns what it cost.
func (s *sim) measure(ctx context.Context, phase func() error) (load, time.Duration, error) {
	before, err := s.load(ctx)
	if err != nil {
		return load{}, 0, err
	}
	start := time.Now()
	if err := phase(); err != nil {
		return load{}, 0, err
	}
	took := time.Since(start)
	after, err := s.load(ctx)
	return after.sub(before), took, err
}

// sharedDevices are the pool's devices as every node sees them.
func sharedDevices(n, capacity int) []instance.Instance {
	out := make([]instance.Instance, n)
	for i := range out {
		id := fmt.Sprintf("cam%05d", i)
		out[i] = instance.Instance{Name: instance.Name(simPool, id, "", true), Config: simPool,
			DeviceID: id, Shared: true, Capacity: capacity}
	}
	return out
}

// shuffled is devices in an order of node i's own: bridges that start
// together do not walk the pool in step.
func shuffled(devices []instance.Instance, i int) []instance.Instance {
	out := append([]instance.Instance(nil), devices...)
	rng := rand.New(rand.NewPCG(uint64(i), 1))
	rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

// setup has every node observe the whole pool at once, as bridges do
// when they all start, and waits until every store lists every Instance
// as seen by its own node (a node's store knows its own Presences only).
func (s *sim) setup(ctx context.Context) error {
	s.devices = sharedDevices(s.o.instances, s.o.capacity)
	s.progress("cluster: %d nodes observing %d shared Instances at once", s.o.nodes, s.o.instances)
	var err error
	s.res.setup, s.res.setupTook, err = s.measure(ctx, func() error {
		start := time.Now()
		errs := make([]error, len(s.nodes))
		failed := make([]int, len(s.nodes))
		var wg sync.WaitGroup
		for i, n := range s.nodes {
			seen := shuffled(s.devices, i)
			wg.Go(func() { failed[i], errs[i] = n.observe(ctx, seen) })
		}
		wg.Wait()
		s.res.observed = time.Since(start)
		for _, f := range failed {
			s.res.failedPasses += f
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return s.waitViews(ctx, s.converged)
	})
	if err != nil {
		return err
	}
	if s.res.memSetup, err = s.memory(); err != nil {
		return err
	}
	s.res.objectBytes, err = s.objectSize(ctx)
	return err
}

// maxPasses bounds a node's Observe passes in the setup.
const maxPasses = 10

// observe records that n sees the devices, again after a pass that
// failed because some Instance kept conflicting (the kube store's
// backoff ran out of attempts), as the bridge's next full discovery would a minute
// later; it returns the passes that failed so.
func (n *simNode) observe(ctx context.Context, seen []instance.Instance) (failed int, err error) {
	for {
		err := n.store.Observe(ctx, n.name, simPool, seen)
		if err == nil || !apierrors.IsConflict(err) || failed+1 == maxPasses {
			return failed, err
		}
		failed++
	}
}

// converged reports whether node's store lists every Instance, each
// seen by node (its own Presence: a node's store knows no other's).
func (s *sim) converged(node string, all []instance.Instance) bool {
	if len(all) != s.o.instances {
		return false
	}
	for _, in := range all {
		if !in.Sees(node) {
			return false
		}
	}
	return true
}

// waitViews waits until every live store's List passes ok, each checked
// on its Changes() feed, for up to settle after the last change.
func (s *sim) waitViews(ctx context.Context, ok func(node string, all []instance.Instance) bool) error {
	for _, n := range s.live() {
		if err := waitView(ctx, n.store, func(all []instance.Instance) bool { return ok(n.name, all) }); err != nil {
			return fmt.Errorf("%s's view: %w", n.name, err)
		}
	}
	return nil
}

func waitView(ctx context.Context, st *kube.Store, ok func([]instance.Instance) bool) error {
	ch, stop := st.Changes()
	defer stop()
	for {
		all, err := st.List(ctx)
		if err != nil {
			return err
		}
		if ok(all) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-time.After(settle):
			return fmt.Errorf("not there %v after the last change", settle)
		}
	}
}

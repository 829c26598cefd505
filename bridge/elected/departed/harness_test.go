package departed

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/electtest"
)

// Test timing: a test's waits, and the janitors' retries.
const (
	testRetry  = electtest.Retry
	testLease  = electtest.Lease
	waitLimit  = 20 * time.Second
	pollPeriod = 20 * time.Millisecond
)

// cluster is one test's namespace (electtest.Cluster), with an admin's
// store to arrange Instances through, and the record of the janitors'
// calls.
type cluster struct {
	*electtest.Cluster
	t     *testing.T
	setup *kube.Store
	rec   *recorder
}

// server is the test's API server and its admin's client.
type server struct {
	env   *apitest.Env
	admin kubernetes.Interface
}

// newCluster makes a namespace in which the bridge's user may elect a
// leader, and a Node object for each of nodes.
func newCluster(t *testing.T, s server, nodes ...string) *cluster {
	t.Helper()
	c := &cluster{Cluster: electtest.NewCluster(t, s.env, s.admin, nodes...), t: t, rec: &recorder{}}
	c.setup = c.store(s.env.Config)
	return c
}

// store is a kube.Store of the test's namespace with a client of cfg's,
// watching until the test's cleanups.
func (c *cluster) store(cfg *rest.Config) *kube.Store {
	c.t.Helper()
	client, err := dynamic.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	c.t.Cleanup(stop)
	s, err := kube.New(ctx, client, c.Namespace, kube.AllPools)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// startJanitor runs a janitor as node's bridge would, the job of an
// elected bridge with a client and a store of its own, until the
// returned stop is called or the test ends.
func (c *cluster) startJanitor(node string) (stop func()) {
	c.t.Helper()
	cfg, err := c.Env.ConfigFor(electtest.User)
	if err != nil {
		c.t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		c.t.Fatal(err)
	}
	open := func(ctx context.Context) (elected.Store, error) {
		s, err := kube.New(ctx, dyn, c.Namespace, kube.AllPools)
		if err != nil {
			return nil, err
		}
		return &counted{Store: s, who: node, rec: c.rec}, nil
	}
	j, err := New(Config{Client: client, UnseenGrace: testRetry, PruneEvery: testRetry})
	if err != nil {
		c.t.Fatal(err)
	}
	return c.Start(node, elected.Config{OpenStore: open, Jobs: []elected.Job{j}})
}

// leader waits until the Lease names a holder whose sweeps number more
// than after, and returns it: that leader watches the Nodes and has
// swept.
func (c *cluster) leader(after map[string]int) string {
	c.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		if holder := c.Holder(); holder != "" && c.rec.sweeps(holder) > after[holder] {
			return holder
		}
		time.Sleep(pollPeriod)
	}
	c.t.Fatalf("no leader has swept within %v; sweeps %v", waitLimit, c.rec.allSweeps())
	return ""
}

// waitFor waits until cond holds of the Instances as the admin's store
// sees them.
func (c *cluster) waitFor(what string, cond func(map[string]instance.Instance) bool) {
	c.t.Helper()
	deadline := time.Now().Add(waitLimit)
	var last map[string]instance.Instance
	for time.Now().Before(deadline) {
		last = c.instances()
		if cond(last) {
			return
		}
		time.Sleep(pollPeriod)
	}
	c.t.Fatalf("%s: not within %v; instances %+v", what, waitLimit, last)
}

// forgets waits until the janitors' ForgetNode calls number at least n
// and returns them: a call is recorded when it returns, and its writes
// can reach the admin's store (waitFor) a moment before.
func (c *cluster) forgets(n int) []forget {
	c.t.Helper()
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(pollPeriod) {
		if calls := c.rec.calls(); len(calls) >= n {
			return calls
		}
	}
	return c.rec.calls()
}

// instances are the Instances by name, as the admin's store sees them.
func (c *cluster) instances() map[string]instance.Instance {
	c.t.Helper()
	all, err := c.setup.List(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]instance.Instance{}
	for _, in := range all {
		out[in.Name] = in
	}
	return out
}

// arrange records, as the nodes' own bridges would, that each node of
// seen sees the devices and that claims are made.
func (c *cluster) arrange(seen map[string][]instance.Instance, claims ...instance.Claim) {
	c.t.Helper()
	for _, node := range slices.Sorted(maps.Keys(seen)) {
		if err := c.setup.Observe(c.t.Context(), node, "cam", seen[node]); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.setup.Claim(c.t.Context(), claims); err != nil {
		c.t.Fatal(err)
	}
}

// recorder keeps every janitor's calls of the Store, as counted reports
// them.
type recorder struct {
	mu sync.Mutex
	// lists counts sweeps (Nodes is only called by a sweep) by janitor.
	lists map[string]int
	// forgets are the ForgetNode calls.
	forgets []forget
	// pruneCalls counts PruneUnseen calls by janitor, pruneRunning those
	// not returned; lingerPrune, when set, makes each call last until its
	// context ends and lingerPrune more, as a deletion under way when
	// leadership ends does.
	pruneCalls, pruneRunning map[string]int
	lingerPrune              time.Duration
	// pruned counts the Instances PruneUnseen deleted.
	pruned int
}

func (r *recorder) prunes(who string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pruneCalls[who]
}

func (r *recorder) pruning(who string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pruneRunning[who]
}

type forget struct {
	who, node string
	freed     int
}

func (r *recorder) sweeps(who string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists[who]
}

func (r *recorder) allSweeps() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.lists)
}

func (r *recorder) calls() []forget {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.forgets)
}

// counted is a janitor's Store, reporting its calls to rec.
type counted struct {
	elected.Store
	who string
	rec *recorder
}

func (c *counted) Nodes(ctx context.Context) ([]string, error) {
	c.rec.mu.Lock()
	if c.rec.lists == nil {
		c.rec.lists = map[string]int{}
	}
	c.rec.lists[c.who]++
	c.rec.mu.Unlock()
	return c.Store.Nodes(ctx)
}

func (c *counted) ForgetNode(ctx context.Context, node string) (int, error) {
	freed, err := c.Store.ForgetNode(ctx, node)
	c.rec.mu.Lock()
	c.rec.forgets = append(c.rec.forgets, forget{who: c.who, node: node, freed: freed})
	c.rec.mu.Unlock()
	return freed, err
}

func (c *counted) PruneUnseen(ctx context.Context, grace time.Duration, now time.Time) (int, error) {
	c.rec.mu.Lock()
	if c.rec.pruneCalls == nil {
		c.rec.pruneCalls, c.rec.pruneRunning = map[string]int{}, map[string]int{}
	}
	c.rec.pruneCalls[c.who]++
	c.rec.pruneRunning[c.who]++
	linger := c.rec.lingerPrune
	c.rec.mu.Unlock()
	defer func() {
		c.rec.mu.Lock()
		c.rec.pruneRunning[c.who]--
		c.rec.mu.Unlock()
	}()
	n, err := c.Store.PruneUnseen(ctx, grace, now)
	c.rec.mu.Lock()
	c.rec.pruned += n
	c.rec.mu.Unlock()
	if linger > 0 {
		<-ctx.Done()
		time.Sleep(linger)
	}
	return n, err
}

// dynamic is an admin's dynamic client.
func (c *cluster) dynamic() dynamic.Interface {
	c.t.Helper()
	client, err := dynamic.NewForConfig(c.Env.Config)
	if err != nil {
		c.t.Fatal(err)
	}
	return client
}

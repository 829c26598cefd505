package departed

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// bridgeUser is the identity every test janitor runs as, with exactly the
// rights the bridge is granted: if leader election or the janitor needed
// another verb, the tests would fail.
const bridgeUser = "bridge"

// Test timing: fast enough for tests, and the lease a whole number of
// seconds, since the Lease records it in seconds.
const (
	testLease  = 2 * time.Second
	testRenew  = time.Second
	testRetry  = 200 * time.Millisecond
	waitLimit  = 20 * time.Second
	pollPeriod = 20 * time.Millisecond
)

// grantBridge gives bridgeUser, cluster-wide, the nodes, Instances and
// Presences rules of the bridge's RBAC; leases come per namespace (newCluster).
func grantBridge(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cdi-bridge-test"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{kube.Group}, Resources: []string{"instances", "presences"},
			Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cdi-bridge-test"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: bridgeUser}}}
	rbac := admin.RbacV1()
	if _, err := rbac.ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// cluster is one test's namespace, with Node objects, an admin's store to
// arrange Instances through, and the record of the janitors' calls.
type cluster struct {
	t     *testing.T
	env   *apitest.Env
	ns    string
	admin kubernetes.Interface
	setup *kube.Store
	rec   *recorder
}

// server is the test's API server and its admin's client.
type server struct {
	env   *apitest.Env
	admin kubernetes.Interface
}

// newCluster makes a namespace in which bridgeUser may elect a leader,
// and a Node object for each of nodes. Nodes are cluster-wide: every
// test names its own.
func newCluster(t *testing.T, s server, nodes ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, env: s.env, ns: s.env.Namespace(t), admin: s.admin, rec: &recorder{}}
	// As bridge/deploy/rbac.yaml has it: get and update of the one Lease
	// by name; create cannot be limited to a name.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{DefaultLease},
			Verbs: []string{"get", "update"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: bridgeUser}}}
	if _, err := s.admin.RbacV1().Roles(c.ns).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.RbacV1().RoleBindings(c.ns).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.createNodes(nodes...)
	c.setup = c.store(s.env.Config)
	return c
}

// createNodes creates a Node object, with just a name, for each of nodes.
func (c *cluster) createNodes(nodes ...string) {
	c.t.Helper()
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if _, err := c.admin.CoreV1().Nodes().Create(c.t.Context(), node, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
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
	s, err := kube.New(ctx, client, c.ns, kube.AllPools)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// startJanitor runs a janitor as node's bridge would, with a client and a
// store of its own, until the returned stop is called or the test ends.
// Its log is shown when the test fails.
func (c *cluster) startJanitor(node string) (stop func()) {
	c.t.Helper()
	cfg, err := c.env.ConfigFor(bridgeUser)
	if err != nil {
		c.t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	logs := &syncBuffer{}
	dyn, err := dynamic.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		c.t.Fatal(err)
	}
	open := func(ctx context.Context) (Store, error) {
		s, err := kube.New(ctx, dyn, c.ns, kube.AllPools)
		if err != nil {
			return nil, err
		}
		return &counted{Store: s, who: node, rec: c.rec}, nil
	}
	j, err := New(Config{Client: client, OpenStore: open, Node: node,
		Namespace: c.ns, LeaseDuration: testLease, RenewDeadline: testRenew, RetryPeriod: testRetry,
		NodePoll: testRetry, UnseenGrace: testRetry, PruneEvery: testRetry, Logger: logs.logger(),
		WhileLeading: c.rec.whileLeading(node)})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				c.t.Errorf("janitor %s: %v", node, err)
			}
		})
	}
	c.t.Cleanup(func() {
		stop()
		if c.t.Failed() {
			c.t.Logf("janitor %s's log:\n%s", node, logs.String())
		}
	})
	return stop
}

// leader waits until the Lease names a holder whose sweeps number more
// than after, and returns it: that leader watches the Nodes and has
// swept.
func (c *cluster) leader(after map[string]int) string {
	c.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		lease, err := c.admin.CoordinationV1().Leases(c.ns).Get(c.t.Context(), DefaultLease, metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil {
			if holder := *lease.Spec.HolderIdentity; holder != "" && c.rec.sweeps(holder) > after[holder] {
				return holder
			}
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

// syncBuffer is a log that janitors' goroutines may write to after the
// test has ended, unlike t.Log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// logTail is the most of a janitor's log a syncBuffer keeps: the end of
// a long run's.
const logTail = 1 << 20

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > logTail {
		b.buf.Next(b.buf.Len() - logTail/2)
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recorder keeps every janitor's calls of the Store, as counted reports
// them.
type recorder struct {
	mu sync.Mutex
	// lists counts sweeps (Nodes is only called by a sweep) by janitor.
	lists map[string]int
	// forgets are the ForgetNode calls.
	forgets []forget
	// leading counts, by janitor, its WhileLeading calls not returned.
	leading map[string]int
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

// whileLeading is a janitor's Config.WhileLeading: it counts itself
// leading until ctx ends.
func (r *recorder) whileLeading(who string) func(context.Context, Store) {
	return func(ctx context.Context, store Store) {
		if store == nil {
			panic("WhileLeading without a store")
		}
		r.mu.Lock()
		if r.leading == nil {
			r.leading = map[string]int{}
		}
		r.leading[who]++
		r.mu.Unlock()
		<-ctx.Done()
		r.mu.Lock()
		r.leading[who]--
		r.mu.Unlock()
	}
}

func (r *recorder) allLeading() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for who, n := range r.leading {
		if n != 0 {
			out[who] = n
		}
	}
	return out
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
	Store
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
	client, err := dynamic.NewForConfig(c.env.Config)
	if err != nil {
		c.t.Fatal(err)
	}
	return client
}

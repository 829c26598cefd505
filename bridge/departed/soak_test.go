package departed

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

var (
	flagSoak     = flag.Duration("soak", time.Minute, "how long TestSoak runs; 0 skips it")
	flagSoakSeed = flag.Uint64("soak-seed", 0, "TestSoak's seed, to replay a run; 0 picks one, printed at the start")
)

// Soak timing: each simulated bridge discovers every soakPeriod, and
// TestSoak acts every few tens of milliseconds, checking after each act.
const (
	soakPeriod  = time.Second
	soakNodes   = 3
	soakMaxStep = 150 * time.Millisecond
)

// TestSoak runs three nodes' bridges against one real API server, each a
// store of the pools it serves (kube.Store, ServedPools) discovering
// every soakPeriod, and a departed-node janitor (leader election, the
// sweep, ForgetNode, PruneUnseen with a grace of 200 ms), while random
// events come: devices vanish and come back, a drop-in is added and
// removed, Presences are deleted by hand, a node's Node object is
// deleted and registered again, the leader's bridge restarts, simulated
// containers claim and release slots. After every event it checks that
// no Instance a Presence lists has been missing for longer than one
// discovery period, and that no slot a running container holds has been
// freed. -soak sets how long (make test: a minute, make bench: ten),
// -soak-seed replays a run.
func TestSoak(t *testing.T) {
	if *flagSoak == 0 || testing.Short() {
		t.Skip("-soak 0, or -short")
	}
	seed := *flagSoakSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d: replay with go test -run '^TestSoak$' -soak=%v -soak-seed=%d ./bridge/departed", seed, *flagSoak, seed)
	env := apitest.StartWithInstances(t, apitest.Options{Users: []apitest.User{{Name: bridgeUser}}})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	grantBridge(t, admin)
	names := make([]string, soakNodes)
	for i := range names {
		names[i] = fmt.Sprintf("s-n%d", i)
	}
	c := newCluster(t, server{env: env, admin: admin}, names...)
	s := newSoak(t, c, seed, names)
	s.run(*flagSoak)
	c.rec.mu.Lock()
	pruned := c.rec.pruned
	c.rec.mu.Unlock()
	freed := 0
	for _, f := range c.rec.calls() {
		freed += f.freed
	}
	t.Logf("%d steps, %d checks; events %v; containers started %d; the janitors pruned %d Instances, cleared nodes %d times freeing %d slots; longest a listed Instance was seen missing: %v",
		s.steps, s.checks, s.events, s.started, pruned, len(c.rec.calls()), freed, s.longestMissing)
}

// soak is one run.
type soak struct {
	t     *testing.T
	c     *cluster
	rng   *rand.Rand
	nodes []*soakNode
	api   dynamic.Interface
	// janitors are each node's janitor's stop.
	janitors map[string]func()
	// missing is since when each (Presence, device) pair has been seen
	// listed but missing.
	missing        map[[2]string]time.Time
	longestMissing time.Duration
	steps, checks  int
	events         map[string]int
	started        int
	nextID         int
}

// soakNode is one node and its simulated bridge.
type soakNode struct {
	name  string
	store *kube.Store
	// discover serializes discoveries, as a bridge's one discovery
	// goroutine does; mu guards the rest.
	discover sync.Mutex
	reported map[string]bool // under discover: the pools the last discovery reported
	mu       sync.Mutex
	// visible are, by pool, the devices the node's drop-ins report; a
	// pool absent is one whose drop-in is not there.
	visible map[string]map[string]bool
	// registered is whether its Node object exists, and since when it
	// was registered again.
	registered bool
	backAt     time.Time
	// containers hold slots; departed are those of a deletion of the
	// Node, whose claims the janitor may free.
	containers, departed []soakContainer
}

// soakContainer is a simulated container holding one slot.
type soakContainer struct {
	claim  instance.Claim
	pool   string
	device string
}

// Pools: cameras every node may see (shared, two slots each), terminals
// of each node's own, and microphones whose drop-in comes and goes.
var soakPools = map[string]struct {
	ids      []string
	shared   bool
	capacity int
}{
	"cam": {[]string{"c0", "c1", "c2", "c3", "c4", "c5"}, true, 2},
	"tty": {[]string{"t0", "t1", "t2", "t3"}, false, 1},
	"mic": {[]string{"m0", "m1"}, false, 1},
}

func newSoak(t *testing.T, c *cluster, seed uint64, names []string) *soak {
	s := &soak{t: t, c: c, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), api: c.dynamic(),
		janitors: map[string]func(){}, missing: map[[2]string]time.Time{}, events: map[string]int{}}
	cfg, err := c.env.ConfigFor(bridgeUser)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		n := &soakNode{name: name, registered: true, visible: map[string]map[string]bool{}, reported: map[string]bool{}}
		for _, pool := range []string{"cam", "tty"} {
			n.visible[pool] = map[string]bool{}
			for _, id := range soakPools[pool].ids {
				n.visible[pool][id] = true
			}
		}
		n.store = s.bridgeStore(cfg)
		s.nodes = append(s.nodes, n)
		s.janitors[name] = c.startJanitor(name)
	}
	return s
}

// bridgeStore is a node's store, as cdi-bridge starts it, with the
// bridge's rights, until the test ends.
func (s *soak) bridgeStore(cfg *rest.Config) *kube.Store {
	ctx, stop := context.WithCancel(context.Background())
	s.t.Cleanup(stop)
	st, err := kube.StartConfig(ctx, cfg, s.c.ns, kube.ServedPools)
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// run acts and checks until d has passed, while every node discovers
// every soakPeriod.
func (s *soak) run(d time.Duration) {
	ctx, stop := context.WithCancel(s.t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for _, n := range s.nodes {
		s.discover(ctx, n)
		wg.Go(func() {
			tick := time.NewTicker(soakPeriod)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					s.discover(ctx, n)
				}
			}
		})
	}
	for end := time.Now().Add(d); time.Now().Before(end); s.steps++ {
		time.Sleep(time.Duration(s.rng.Int64N(int64(soakMaxStep))))
		s.act(ctx)
		s.check(ctx)
	}
}

// discover observes what n sees of each pool, as its bridge's discovery
// does: the visible devices, and those that vanished while one of its
// containers holds a slot (discovery keeps them until released); a pool
// whose drop-in went since the last discovery is withdrawn, once.
func (s *soak) discover(ctx context.Context, n *soakNode) {
	n.discover.Lock()
	defer n.discover.Unlock()
	for _, pool := range slices.Sorted(maps.Keys(soakPools)) {
		seen := n.seen(pool)
		if seen == nil && !n.reported[pool] {
			continue
		}
		err := n.store.Observe(ctx, n.name, pool, seen)
		if err != nil && ctx.Err() == nil {
			s.t.Logf("%s: observing pool %s: %v", n.name, pool, err)
		}
		n.reported[pool] = seen != nil
	}
}

// seen is what n's discovery reports of pool: nil when its drop-in is not
// there and no container holds a slot of it.
func (n *soakNode) seen(pool string) []instance.Instance {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := map[string]bool{}
	for id := range n.visible[pool] {
		ids[id] = true
	}
	for _, c := range n.containers {
		if c.pool == pool {
			ids[c.device] = true
		}
	}
	if _, served := n.visible[pool]; !served && len(ids) == 0 {
		return nil
	}
	p := soakPools[pool]
	out := []instance.Instance{}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		out = append(out, instance.Instance{Name: instance.Name(pool, id, n.name, p.shared), Config: pool, DeviceID: id,
			Shared: p.shared, Capacity: p.capacity})
	}
	return out
}

// soakEvent is one kind of event, with its weight among them.
type soakEvent struct {
	kind   string
	weight int
	happen func(*soak, context.Context, *soakNode)
}

var soakEvents = []soakEvent{
	{"container starts", 30, (*soak).startContainer},
	{"container ends", 20, (*soak).endContainer},
	{"device vanishes or comes back", 15, (*soak).replug},
	{"drop-in added or removed", 7, (*soak).toggleDropIn},
	{"Presence deleted by hand", 10, func(s *soak, ctx context.Context, _ *soakNode) { s.deletePresence(ctx) }},
	{"Node deleted", 6, (*soak).deleteNode},
	{"leader's bridge restarts", 5, func(s *soak, _ context.Context, _ *soakNode) { s.moveLeadership() }},
	{"nothing", 7, func(*soak, context.Context, *soakNode) {}},
}

// act makes one random event happen, on a random node, after
// registering again the deleted nodes whose time has come.
func (s *soak) act(ctx context.Context) {
	n := s.nodes[s.rng.IntN(len(s.nodes))]
	s.registerAgain(ctx)
	total := 0
	for _, e := range soakEvents {
		total += e.weight
	}
	r := s.rng.IntN(total)
	for _, e := range soakEvents {
		if r -= e.weight; r < 0 {
			s.events[e.kind]++
			e.happen(s, ctx, n)
			return
		}
	}
}

// startContainer has a container on n claim a free slot of a device n
// sees, as an Allocate would, at the Configuration level (a value of its
// own, so that releasing it never frees another container's).
func (s *soak) startContainer(ctx context.Context, n *soakNode) {
	n.mu.Lock()
	registered := n.registered
	n.mu.Unlock()
	if !registered {
		return // no pod is admitted on a node without a Node
	}
	pools := slices.Sorted(maps.Keys(soakPools))
	pool := pools[s.rng.IntN(len(pools))]
	seen := n.seen(pool)
	if len(seen) == 0 {
		return
	}
	dev := seen[s.rng.IntN(len(seen))]
	in, err := n.store.Get(dev.Name)
	if err != nil || in == nil {
		return
	}
	var free []string
	for _, slot := range in.Slots() {
		if in.Usage[slot] == "" {
			free = append(free, slot)
		}
	}
	if len(free) == 0 {
		return
	}
	s.nextID++
	c := soakContainer{pool: pool, device: dev.DeviceID, claim: instance.Claim{Instance: dev.Name,
		Slot: free[s.rng.IntN(len(free))], Value: instance.ConfigurationLevelUsage(fmt.Sprint(s.nextID), n.name)}}
	if err := n.store.Claim(ctx, []instance.Claim{c.claim}); err != nil {
		return // taken meanwhile, or gone: the Allocate fails
	}
	n.mu.Lock()
	n.containers = append(n.containers, c)
	n.mu.Unlock()
	s.started++
}

// endContainer ends one of n's containers and releases its slot, as slot
// reclaim does.
func (s *soak) endContainer(ctx context.Context, n *soakNode) {
	n.mu.Lock()
	if len(n.containers) == 0 {
		n.mu.Unlock()
		return
	}
	i := s.rng.IntN(len(n.containers))
	c := n.containers[i]
	n.containers = slices.Delete(n.containers, i, i+1)
	n.mu.Unlock()
	if err := n.store.Release(ctx, []instance.Claim{c.claim}); err != nil {
		s.t.Logf("%s: releasing %s: %v", n.name, c.claim.Slot, err)
	}
}

// replug makes a device of n vanish, or come back, and n discover it.
func (s *soak) replug(ctx context.Context, n *soakNode) {
	n.mu.Lock()
	served := slices.Sorted(maps.Keys(n.visible))
	if len(served) == 0 {
		n.mu.Unlock()
		return
	}
	pool := served[s.rng.IntN(len(served))]
	ids := soakPools[pool].ids
	id := ids[s.rng.IntN(len(ids))]
	if n.visible[pool][id] {
		delete(n.visible[pool], id)
	} else {
		n.visible[pool][id] = true
	}
	n.mu.Unlock()
	s.discover(ctx, n)
}

// toggleDropIn adds n's microphones' drop-in, or removes it.
func (s *soak) toggleDropIn(ctx context.Context, n *soakNode) {
	n.mu.Lock()
	if _, ok := n.visible["mic"]; ok {
		delete(n.visible, "mic")
	} else {
		n.visible["mic"] = map[string]bool{"m0": true, "m1": true}
	}
	n.mu.Unlock()
	s.discover(ctx, n)
}

// deletePresence deletes a random Presence, as kubectl delete cdip does.
func (s *soak) deletePresence(ctx context.Context) {
	list, err := s.api.Resource(kube.PresenceResource).Namespace(s.c.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		return
	}
	name := list.Items[s.rng.IntN(len(list.Items))].GetName()
	if err := s.api.Resource(kube.PresenceResource).Namespace(s.c.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.t.Fatal(err)
	}
}

// deleteNode deletes n's Node object, unless another node's is gone:
// n's containers go with it (their slots may be freed from now on), and
// it is registered again (registerAgain), its bridge running on
// throughout: half the time within 20 ms, new containers starting on it
// at once, while the janitor may be clearing it; else a random 0.2 to
// 3 s later.
func (s *soak) deleteNode(ctx context.Context, n *soakNode) {
	for _, m := range s.nodes {
		m.mu.Lock()
		registered := m.registered
		m.mu.Unlock()
		if !registered {
			return
		}
	}
	n.mu.Lock()
	n.registered = false
	n.backAt = time.Now().Add(200*time.Millisecond + time.Duration(s.rng.Int64N(int64(2800*time.Millisecond))))
	n.departed = append(n.departed, n.containers...)
	n.containers = nil
	n.mu.Unlock()
	if err := s.c.admin.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if s.rng.IntN(2) == 0 {
		return
	}
	time.Sleep(time.Duration(s.rng.Int64N(int64(20 * time.Millisecond))))
	n.mu.Lock()
	n.backAt = time.Now()
	n.mu.Unlock()
	s.registerAgain(ctx)
	for range 1 + s.rng.IntN(3) {
		s.startContainer(ctx, n)
	}
}

// registerAgain registers a deleted node's Node again once its time has
// come, and releases the slots its departed containers held that the
// janitor has not freed (as the node's slot reclaim would).
func (s *soak) registerAgain(ctx context.Context) {
	for _, n := range s.nodes {
		n.mu.Lock()
		due := !n.registered && time.Now().After(n.backAt)
		n.mu.Unlock()
		if !due {
			continue
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		if _, err := s.c.admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			s.t.Fatal(err)
		}
		n.mu.Lock()
		n.registered = true
		departed := n.departed
		n.departed = nil
		n.mu.Unlock()
		for _, c := range departed {
			if err := n.store.Release(ctx, []instance.Claim{c.claim}); err != nil {
				s.t.Logf("%s: releasing %s of a departed container: %v", n.name, c.claim.Slot, err)
			}
		}
	}
}

// moveLeadership stops the leading janitor's bridge and starts it again:
// another bridge, or the same, leads next.
func (s *soak) moveLeadership() {
	lease, err := s.c.admin.CoordinationV1().Leases(s.c.ns).Get(s.t.Context(), DefaultLease, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return
	}
	holder := *lease.Spec.HolderIdentity
	stop, ok := s.janitors[holder]
	if !ok {
		return
	}
	stop()
	s.janitors[holder] = s.c.startJanitor(holder)
}

// check reads the Presences, the Instances and the Presences again from
// the API server and fails the test if a device that both lists of a
// Presence name has been missing for longer than soakPeriod, or if a
// running container's slot does not hold its claim.
func (s *soak) check(ctx context.Context) {
	s.checks++
	before := s.presences(ctx)
	instances := s.instances(ctx)
	after := s.presences(ctx)
	now := time.Now()
	still := map[[2]string]bool{}
	for name, devices := range before {
		for _, d := range devices {
			if _, ok := instances[d]; ok || !slices.Contains(after[name], d) {
				continue
			}
			k := [2]string{name, d}
			still[k] = true
			since, ok := s.missing[k]
			if !ok {
				s.missing[k] = now
				continue
			}
			s.longestMissing = max(s.longestMissing, now.Sub(since))
			if now.Sub(since) > soakPeriod {
				s.t.Fatalf("step %d: Presence %s has listed %s for %v, and it is missing", s.steps, name, d, now.Sub(since))
			}
		}
	}
	for k := range s.missing {
		if !still[k] {
			delete(s.missing, k)
		}
	}
	for _, n := range s.nodes {
		n.mu.Lock()
		containers := slices.Clone(n.containers)
		n.mu.Unlock()
		for _, c := range containers {
			if got := instances[c.claim.Instance][c.claim.Slot]; got != c.claim.Value {
				s.t.Fatalf("step %d: slot %s, held by a running container on %s (%s), is %q", s.steps, c.claim.Slot, n.name,
					c.claim.Value, got)
			}
		}
	}
}

// presences are the devices each Presence lists, by name.
func (s *soak) presences(ctx context.Context) map[string][]string {
	list, err := s.api.Resource(kube.PresenceResource).Namespace(s.c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, obj := range list.Items {
		devices, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "devices")
		sort.Strings(devices)
		out[obj.GetName()] = devices
	}
	return out
}

// instances are the slots' usage of every Instance, by name.
func (s *soak) instances(ctx context.Context) map[string]map[string]string {
	list, err := s.api.Resource(kube.Resource).Namespace(s.c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, obj := range list.Items {
		usage, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "deviceUsage")
		if usage == nil {
			usage = map[string]string{}
		}
		out[obj.GetName()] = usage
	}
	return out
}

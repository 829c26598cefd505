package departed

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// TestJanitor runs janitors as bridges of several nodes against one real
// API server, each as a user with only the bridge's rights.
func TestJanitor(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{Users: []apitest.User{{Name: bridgeUser}}})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	grantBridge(t, admin)
	tests := []struct {
		name string
		run  func(*testing.T, server)
	}{
		{"a deleted node is cleared once", testDeleted},
		{"the leader sweeps when it starts", testSweep},
		{"restarted bridges clear nothing", testRestart},
		{"a bridge without a Node stays out", testNoOwnNode},
		{"more work while leading, and only then", testWhileLeading},
		{"a departed node's empty Presence is swept", testEmptyPresenceSwept},
		{"pruning has stopped when Run returns", testPruneStopsWithRun},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, server{env: env, admin: admin}) })
	}
}

// shared is a camera every node sees as one Instance.
func shared(id string, capacity int) instance.Instance {
	return instance.Instance{Name: instance.Name("cam", id, "", true), Config: "cam", DeviceID: id, Shared: true, Capacity: capacity}
}

// local is a device of node's own.
func local(node, id string) instance.Instance {
	return instance.Instance{Name: instance.Name("cam", id, node, false), Config: "cam", DeviceID: id, Capacity: 1}
}

func claim(in instance.Instance, i int, value string) instance.Claim {
	return instance.Claim{Instance: in.Name, Slot: instance.SlotID(in.Name, i), Value: value}
}

// is reports whether in has exactly nodes and usage.
func is(in instance.Instance, nodes []string, usage map[string]string) bool {
	return slices.Equal(in.Nodes, nodes) && maps.Equal(in.Usage, usage)
}

// testDeleted: n1, n2 and n3 share a camera, n1 has a device of its own,
// and both hold claims. n1's bridge is gone (no janitor runs for it) when
// its Node is deleted: the leader among n2 and n3 frees n1's claims at
// both levels and removes it from the camera's nodes, n1's device goes
// (pruned once unseen),
// n2's claims stay. When the other bridge takes over, its sweep finds
// nothing: across both, ForgetNode ran once, and freed.
func testDeleted(t *testing.T, s server) {
	c := newCluster(t, s, "a-n1", "a-n2", "a-n3")
	cam, own := shared("a-porch", 4), local("a-n1", "tty")
	c.arrange(map[string][]instance.Instance{"a-n1": {cam, own}, "a-n2": {cam}, "a-n3": {cam}},
		claim(cam, 0, "a-n1"), claim(cam, 1, instance.ConfigurationLevelUsage("0", "a-n1")), claim(own, 0, "a-n1"),
		claim(cam, 2, "a-n2"), claim(cam, 3, instance.ConfigurationLevelUsage("1", "a-n2")))
	stops := map[string]func(){"a-n2": c.startJanitor("a-n2"), "a-n3": c.startJanitor("a-n3")}
	first := c.leader(nil)
	if err := c.admin.CoreV1().Nodes().Delete(t.Context(), "a-n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{claim(cam, 0, "").Slot: "", claim(cam, 1, "").Slot: "",
		claim(cam, 2, "").Slot: "a-n2", claim(cam, 3, "").Slot: instance.ConfigurationLevelUsage("1", "a-n2")}
	c.waitFor("a-n1's claims cleared", func(m map[string]instance.Instance) bool {
		_, ownLeft := m[own.Name]
		return !ownLeft && is(m[cam.Name], []string{"a-n2", "a-n3"}, want)
	})
	// The writes show before ForgetNode returns: stopping the leader in
	// between cancels its last write's answer, and the call counts what
	// it knows went through.
	c.forgets(1)
	sweeps := c.rec.allSweeps()
	stops[first]()
	next := c.leader(sweeps)
	time.Sleep(5 * testRetry) // for anything the new leader's sweep queued
	// Every call counts, not only those that freed something: a second
	// janitor acting at the same time could free nothing, its writes
	// losing the race, and still show that two acted.
	if calls := c.forgets(1); len(calls) != 1 || calls[0] != (forget{who: first, node: "a-n1", freed: 3}) {
		t.Fatalf("ForgetNode calls %+v; want one, by the leader %s, freeing a-n1's 3 slots", calls, first)
	}
	if in := c.instances()[cam.Name]; !is(in, []string{"a-n2", "a-n3"}, want) {
		t.Fatalf("after %s took over from %s: camera %+v", next, first, in)
	}
}

// testSweep: a node the Instances name has no Node object (it went while
// no leader watched). The first leader's sweep frees its claims, removes
// it from the shared camera and deletes the Instance only it saw.
func testSweep(t *testing.T, s server) {
	c := newCluster(t, s, "b-n2")
	cam, yard := shared("b-gate", 3), shared("b-yard", 1)
	c.arrange(map[string][]instance.Instance{"b-gone": {cam, yard}, "b-n2": {cam}},
		claim(cam, 0, "b-gone"), claim(cam, 1, instance.ConfigurationLevelUsage("0", "b-gone")), claim(cam, 2, "b-n2"))
	c.startJanitor("b-n2")
	c.leader(nil)
	want := map[string]string{claim(cam, 0, "").Slot: "", claim(cam, 1, "").Slot: "", claim(cam, 2, "").Slot: "b-n2"}
	c.waitFor("b-gone's claims cleared by the sweep", func(m map[string]instance.Instance) bool {
		_, yardLeft := m[yard.Name]
		return !yardLeft && is(m[cam.Name], []string{"b-n2"}, want)
	})
	if calls := c.forgets(1); len(calls) != 1 || calls[0] != (forget{who: "b-n2", node: "b-gone", freed: 2}) {
		t.Fatalf("ForgetNode calls %+v; want one, of b-gone's 2 slots", calls)
	}
}

// testRestart: both nodes' bridges restart, the leader's last, so that a
// new leadership sweeps. Their Node objects exist throughout: no
// ForgetNode is called and every claim stays.
func testRestart(t *testing.T, s server) {
	c := newCluster(t, s, "c-n1", "c-n2")
	cam := shared("c-door", 2)
	c.arrange(map[string][]instance.Instance{"c-n1": {cam}, "c-n2": {cam}},
		claim(cam, 0, "c-n1"), claim(cam, 1, instance.ConfigurationLevelUsage("0", "c-n2")))
	before := c.instances()[cam.Name]
	stops := map[string]func(){"c-n1": c.startJanitor("c-n1"), "c-n2": c.startJanitor("c-n2")}
	first := c.leader(nil)
	other := map[string]string{"c-n1": "c-n2", "c-n2": "c-n1"}[first]
	for _, n := range []string{other, first} {
		sweeps := c.rec.allSweeps()
		stops[n]()
		stops[n] = c.startJanitor(n)
		if n == first {
			c.leader(sweeps)
		}
	}
	time.Sleep(5 * testRetry) // for anything the new leader's sweep queued
	if calls := c.rec.calls(); len(calls) != 0 {
		t.Fatalf("ForgetNode called for nodes that exist: %+v", calls)
	}
	if in := c.instances()[cam.Name]; !is(in, before.Nodes, before.Usage) {
		t.Fatalf("camera after the restarts %+v, before %+v", in, before)
	}
}

// testNoOwnNode: a bridge whose node has no Node object does not take
// part, though the Instances name only nodes without one; once its Node
// is created, it leads and clears the node that has none.
func testNoOwnNode(t *testing.T, s server) {
	c := newCluster(t, s)
	cam := shared("d-hall", 2)
	c.arrange(map[string][]instance.Instance{"d-self": {cam}, "d-other": {cam}},
		claim(cam, 0, "d-self"), claim(cam, 1, "d-other"))
	before := c.instances()[cam.Name]
	c.startJanitor("d-self")
	time.Sleep(2 * testLease)
	_, err := c.admin.CoordinationV1().Leases(c.ns).Get(t.Context(), DefaultLease, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the Lease of a bridge without a Node: %v, want NotFound", err)
	}
	if calls, now := c.rec.calls(), c.instances()[cam.Name]; len(calls) != 0 || !is(now, before.Nodes, before.Usage) {
		t.Fatalf("a bridge without a Node acted: calls %+v, camera %+v, before %+v", calls, now, before)
	}
	c.createNodes("d-self")
	c.leader(nil)
	want := map[string]string{claim(cam, 0, "").Slot: "d-self", claim(cam, 1, "").Slot: ""}
	c.waitFor("d-other cleared once d-self's Node exists", func(m map[string]instance.Instance) bool {
		return is(m[cam.Name], []string{"d-self"}, want)
	})
}

// TestNewChecksConfig needs no server: New refuses what leader election
// would, before anything runs.
func TestNewChecksConfig(t *testing.T) {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	open := func(context.Context) (Store, error) { return &counted{}, nil }
	ok := Config{Client: client, OpenStore: open, Node: "n1", Namespace: "cdi-system"}
	tests := []struct {
		name   string
		change func(*Config)
		valid  bool
	}{
		{"defaults", func(*Config) {}, true},
		{"test timing", func(c *Config) { c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = testLease, testRenew, testRetry }, true},
		{"no client", func(c *Config) { c.Client = nil }, false},
		{"no store", func(c *Config) { c.OpenStore = nil }, false},
		{"no node", func(c *Config) { c.Node = "" }, false},
		{"no namespace", func(c *Config) { c.Namespace = "" }, false},
		{"renew deadline past the lease", func(c *Config) { c.RenewDeadline = 20 * time.Second }, false},
		{"retry past the renew deadline", func(c *Config) { c.RetryPeriod = 9 * time.Second }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.change(&cfg)
			_, err := New(cfg)
			if tt.valid != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("New: %v; want valid %v, else ErrConfig", err, tt.valid)
			}
		})
	}
}

// testWhileLeading: Config.WhileLeading runs in the leader alone, and has
// returned when the leader's Run has; the next leader runs it in turn.
func testWhileLeading(t *testing.T, s server) {
	c := newCluster(t, s, "e-n1", "e-n2")
	stops := map[string]func(){"e-n1": c.startJanitor("e-n1"), "e-n2": c.startJanitor("e-n2")}
	first := c.leader(nil)
	c.waitLeading(map[string]int{first: 1})
	stops[first]()
	if got := c.rec.allLeading()[first]; got != 0 {
		t.Fatalf("%s's WhileLeading still runs after its Run returned", first)
	}
	other := map[string]string{"e-n1": "e-n2", "e-n2": "e-n1"}[first]
	c.waitLeading(map[string]int{other: 1})
}

// waitLeading waits until the janitors' WhileLeading calls running are
// exactly want.
func (c *cluster) waitLeading(want map[string]int) {
	c.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		if maps.Equal(c.rec.allLeading(), want) {
			return
		}
		time.Sleep(pollPeriod)
	}
	c.t.Fatalf("WhileLeading running %v, want %v", c.rec.allLeading(), want)
}

// testEmptyPresenceSwept: a node without a Node object left a Presence
// that lists no device (it saw none of the pool), and no Instance names
// it. The leader's sweep clears it all the same.
func testEmptyPresenceSwept(t *testing.T, s server) {
	c := newCluster(t, s, "f-n1")
	if err := c.setup.Observe(t.Context(), "f-gone", "cam", []instance.Instance{}); err != nil {
		t.Fatal(err)
	}
	c.startJanitor("f-n1")
	c.leader(nil)
	if calls := c.forgets(1); len(calls) != 1 || calls[0].node != "f-gone" {
		t.Fatalf("ForgetNode calls %+v; want one, of f-gone", calls)
	}
	c.waitPresences("f-gone", 0)
}

// waitPresences waits until the API server holds n Presences of node.
func (c *cluster) waitPresences(node string, n int) {
	c.t.Helper()
	presences := c.dynamic().Resource(kube.PresenceResource).Namespace(c.ns)
	for deadline := time.Now().Add(waitLimit); ; time.Sleep(pollPeriod) {
		list, err := presences.List(c.t.Context(), metav1.ListOptions{LabelSelector: kube.LabelNode + "=" + kube.LabelValue(node)})
		if err != nil {
			c.t.Fatal(err)
		}
		if len(list.Items) == n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d Presences of %s after %v, want %d", len(list.Items), node, waitLimit, n)
		}
	}
}

// testPruneStopsWithRun: the leader's pruning is under way (a deletion
// that outlasts the end of its leadership) when its bridge stops. Run
// returns only once it has stopped: another leader's must not overlap it.
func testPruneStopsWithRun(t *testing.T, s server) {
	c := newCluster(t, s, "g-n1")
	c.rec.lingerPrune = 300 * time.Millisecond
	stop := c.startJanitor("g-n1")
	c.leader(nil)
	for deadline := time.Now().Add(waitLimit); c.rec.prunes("g-n1") == 0; time.Sleep(pollPeriod) {
		if time.Now().After(deadline) {
			t.Fatal("the leader never pruned")
		}
	}
	stop()
	if n := c.rec.pruning("g-n1"); n != 0 {
		t.Fatalf("%d PruneUnseen calls still run after the leader's Run returned", n)
	}
}

package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/storetest"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// TestRaces interleaves a node's store and the elected bridge's (the
// janitor's) against a real API server: each case pauses one of them
// between its read and its write, lets the other act, and checks that a
// node's "I see X" wins and that no slot a container holds is freed.
func TestRaces(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		run  func(*testing.T, *apitest.Env, kubernetes.Interface)
	}{
		{"the janitor's delete loses to a Presence written after its look", testPruneLosesToPresence},
		{"the janitor's look finds a Presence written after its mark", testPruneFindsPresence},
		{"a slow first Observe keeps its first Instances", testSlowFirstObserve},
		{"the unseen clock starts again for a recreated Instance", testUnseenClockByUID},
		{"a Presence deleted elsewhere is written again", testPresenceDeletedElsewhere},
		{"an Instance a Presence lists, deleted elsewhere, is created again", testListedInstanceDeleted},
		{"a relist does not hide an Instance the informer holds", testRelistKeepsNewer},
		{"ForgetNode stops for a node that came back and claimed", testForgetReturnedNodeClaim},
		{"ForgetNode stops when the node rewrote its Presence", testForgetRewrittenPresence},
		{"a failed withdrawal is retried", testWithdrawalRetried},
		{"a failed creation is retried", testCreationRetried},
		{"a pool withdrawn while the bridge was down loses its Presence", testStalePresenceDeleted},
		{"a pool withdrawn during a claim stays followed", testRetireDuringClaim},
		{"a claim in a pool withdrawn before is followed", testClaimAfterRetire},
		{"other pools' Instances of the release before are not held", testLegacyOfOtherPools},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, env, admin) })
	}
}

// gate pauses the first call of its hook until it is opened: reached is
// closed when that call arrives.
type gate struct {
	once          sync.Once
	reached, open chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan struct{}), open: make(chan struct{})} }

// at is the hook: it pauses the first call.
func (g *gate) at() {
	g.once.Do(func() {
		close(g.reached)
		<-g.open
	})
}

// wait waits until the hook's first call has arrived.
func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the paused call never came")
	}
}

// exists reports whether the API server holds the named Instance.
func exists(t *testing.T, s *Store, name string) bool {
	t.Helper()
	_, err := s.client.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// presenceDevices is what node's Presence of pool lists in the API
// server, and whether there is one.
func presenceDevices(t *testing.T, s *Store, node, pool string) ([]string, bool) {
	t.Helper()
	obj, err := s.presenceClient.Get(t.Context(), PresenceName(node, pool), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := toPresence(obj)
	if err != nil {
		t.Fatal(err)
	}
	return p.devices, true
}

// waitPresence waits until node's Presence of pool in the API server is
// there (want true) or not; each round runs again first, as a node's
// next discovery would.
func waitPresence(t *testing.T, s *Store, node, pool string, want bool, again func()) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, ok := presenceDevices(t, s, node, pool); ok == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("presence %s: there %v after 20 s, want %v", PresenceName(node, pool), !want, want)
		}
		if again != nil {
			again()
		}
	}
}

// seesNone observes that node sees no device of pool cam (its Presence
// stays, empty), as a node whose camera was unplugged does.
func seesNone(t *testing.T, s *Store, node string) {
	t.Helper()
	if err := s.Observe(t.Context(), node, "cam", []instance.Instance{}); err != nil {
		t.Fatal(err)
	}
}

// testPruneLosesToPresence: camera x is unseen, and the janitor has taken
// its look at the pool's Presences. Node a sees x again (replugged): it
// adds x to its Presence. The janitor then goes on to delete x: it must
// not, since a Presence lists it.
func testPruneLosesToPresence(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	pruneAgainstReplug(t, env, func(j *Store, pause func()) { j.test.pruneListed = func(string) { pause() } })
}

// testPruneFindsPresence: as testPruneLosesToPresence, but node a sees x
// again after the janitor marked x and before its second look at the
// Presences: that look finds x listed, and the mark is taken off.
func testPruneFindsPresence(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	pruneAgainstReplug(t, env, func(j *Store, pause func()) { j.test.pruneMarked = func(string) { pause() } })
}

// pruneAgainstReplug has node a add unseen camera x to its Presence while
// the janitor's PruneUnseen is paused where pauseAt sets its hook, and
// checks that x stays, unmarked once both are done.
func pruneAgainstReplug(t *testing.T, env *apitest.Env, pauseAt func(janitor *Store, pause func())) {
	t.Helper()
	ns := env.Namespace(t)
	node, janitor := newScopedStore(t, env.Config, ns), newStore(t, env.Config, ns)
	x := storetest.Cam("", "x", 1)
	observe(t, node, "a", x)
	seesNone(t, node, "a")
	waitNodes(t, janitor, x.Name)
	g := newGate()
	pauseAt(janitor, g.at)
	done := make(chan error, 1)
	go func() {
		_, err := janitor.PruneUnseen(t.Context(), 0, time.Now())
		done <- err
	}()
	g.wait(t)
	observe(t, node, "a", x)
	close(g.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if devices, _ := presenceDevices(t, node, "a", "cam"); !slices.Contains(devices, x.Name) {
		t.Fatalf("node a's Presence lists %v, want %s", devices, x.Name)
	}
	obj, err := node.client.Get(t.Context(), x.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		t.Fatalf("the janitor deleted %s, which node a's Presence lists", x.Name)
	}
	if err != nil {
		t.Fatal(err)
	}
	if marked(obj) {
		t.Errorf("%s, listed, is still marked for deletion: %v", x.Name, obj.GetAnnotations())
	}
}

// testSlowFirstObserve: node a's first Observe of three new cameras is
// slow (paused after the first is written); meanwhile the janitor's
// clock passes the grace period. The first camera must not be deleted.
func testSlowFirstObserve(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node, janitor := newScopedStore(t, env.Config, ns), newStore(t, env.Config, ns)
	all := cams(3)
	g := newGate()
	node.test.described = func(string) { g.at() }
	done := make(chan error, 1)
	go func() { done <- node.Observe(t.Context(), "a", "cam", all) }()
	g.wait(t)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := lookup(t, janitor, all[0].Name); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the janitor never saw %s", all[0].Name)
		}
	}
	grace, t0 := time.Minute, time.Now()
	for _, now := range []time.Time{t0, t0.Add(grace)} {
		if _, err := janitor.PruneUnseen(t.Context(), grace, now); err != nil {
			t.Fatal(err)
		}
	}
	close(g.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !exists(t, node, all[0].Name) {
		t.Fatalf("the janitor deleted %s, created by node a's Observe before it wrote its Presence", all[0].Name)
	}
}

// testUnseenClockByUID: camera x is unseen when the janitor's clock
// starts; it is deleted by hand and created again (a new object). A grace
// period after the clock started, the new x has been unseen for far less:
// it stays.
func testUnseenClockByUID(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node, janitor := newScopedStore(t, env.Config, ns), newStore(t, env.Config, ns)
	x := storetest.Cam("", "x", 1)
	observe(t, node, "a", x)
	seesNone(t, node, "a")
	waitNodes(t, janitor, x.Name)
	grace, t0 := time.Minute, time.Now()
	if n, err := janitor.PruneUnseen(t.Context(), grace, t0); n != 0 || err != nil {
		t.Fatalf("first pass deleted %d, %v", n, err)
	}
	old := uidOf(t, janitor, x.Name)
	if err := janitor.client.Delete(t.Context(), x.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, node, x.Name)
	observe(t, node, "a", x)
	seesNone(t, node, "a")
	for deadline := time.Now().Add(5 * time.Second); uidOf(t, janitor, x.Name) == old || uidOf(t, janitor, x.Name) == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the janitor never saw the new object")
		}
	}
	waitNodes(t, janitor, x.Name)
	if n, err := janitor.PruneUnseen(t.Context(), grace, t0.Add(grace)); n != 0 || err != nil {
		t.Fatalf("a grace period after the old object's clock started: deleted %d, %v; want none", n, err)
	}
	if !exists(t, node, x.Name) {
		t.Fatalf("%s, unseen for moments, was deleted", x.Name)
	}
}

// uidOf is the UID of the named Instance in s's view, "" when it has
// none.
func uidOf(t *testing.T, s *Store, name string) string {
	t.Helper()
	obj, err := s.newest(name)
	if err != nil {
		t.Fatal(err)
	}
	if obj == nil {
		return ""
	}
	return string(obj.GetUID())
}

// testPresenceDeletedElsewhere: node a's Presence is deleted by hand
// (kubectl delete cdip). It is written again while node a still sees its
// camera, without waiting for its next discovery.
func testPresenceDeletedElsewhere(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node := newScopedStore(t, env.Config, ns)
	x := storetest.Cam("", "x", 1)
	observe(t, node, "a", x)
	if err := node.presenceClient.Delete(t.Context(), PresenceName("a", "cam"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPresence(t, node, "a", "cam", true, nil)
}

// testListedInstanceDeleted: camera x, which node a's Presence lists, is
// deleted by hand. It is created again without waiting for a's next
// discovery.
func testListedInstanceDeleted(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node := newScopedStore(t, env.Config, ns)
	x := storetest.Cam("", "x", 1)
	observe(t, node, "a", x)
	if err := node.client.Delete(t.Context(), x.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !exists(t, node, x.Name); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s, which node a's Presence lists, is still missing after 20 s", x.Name)
		}
	}
}

// testRelistKeepsNewer: node a's store relists while camera y is created
// in its pool: its pool's list is taken before y exists, the informer
// then holds y, and the list of the unlabelled Instances comes after.
// y must stay in the view, through this relist and the next.
func testRelistKeepsNewer(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node, other := newScopedStore(t, env.Config, ns), newScopedStore(t, env.Config, ns)
	x, y := storetest.Cam("", "x", 1), storetest.Cam("", "y", 1)
	observe(t, node, "a", x)
	g := newGate()
	node.test.relisted = func(string) { g.at() }
	done := make(chan struct{})
	go func() {
		node.relist(t.Context())
		close(done)
	}()
	g.wait(t)
	observe(t, other, "b", y)
	held(t, node, y.Name)
	close(g.open)
	<-done
	for i := range 2 {
		if _, ok := lookup(t, node, y.Name); !ok {
			t.Fatalf("after relist %d node a's view lacks %s, which its informer holds", i+1, y.Name)
		}
		node.relist(t.Context())
	}
}

// nodeObject creates a Node called name and deletes it when the test
// ends.
func nodeObject(t *testing.T, admin kubernetes.Interface, name string) {
	t.Helper()
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// testForgetReturnedNodeClaim: the janitor clears node r, whose Node is
// gone; r re-registers and claims a second slot of the camera just
// before the janitor's write there. r's new claim is a running
// container's: it must stay.
func testForgetReturnedNodeClaim(t *testing.T, env *apitest.Env, admin kubernetes.Interface) {
	ns := env.Namespace(t)
	node, janitor := newScopedStore(t, env.Config, ns), newStore(t, env.Config, ns)
	r := "r-" + ns
	cam := storetest.Cam("", "porch", 2)
	observe(t, node, r, cam)
	s0, s1 := instance.Claim{Instance: cam.Name, Slot: instance.SlotID(cam.Name, 0), Value: r},
		instance.Claim{Instance: cam.Name, Slot: instance.SlotID(cam.Name, 1), Value: r}
	if err := node.Claim(t.Context(), []instance.Claim{s0}); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, janitor, cam.Name, s0.Slot, r, 5*time.Second)
	g := newGate()
	janitor.test.forgetWrite = func(string) { g.at() }
	done := make(chan error, 1)
	go func() {
		_, err := janitor.ForgetNode(t.Context(), r)
		done <- err
	}()
	g.wait(t)
	nodeObject(t, admin, r)
	if err := node.Claim(t.Context(), []instance.Claim{s1}); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	err := <-done
	t.Logf("ForgetNode(%s): %v", r, err)
	obj, gerr := janitor.client.Get(t.Context(), cam.Name, metav1.GetOptions{})
	if gerr != nil {
		t.Fatal(gerr)
	}
	in, _ := toInstance(obj)
	if in.Usage[s1.Slot] != r {
		t.Fatalf("slot %s, claimed by %s after its Node came back, is %q", s1.Slot, r, in.Usage[s1.Slot])
	}
}

// testForgetRewrittenPresence: the janitor clears node r, whose Node is
// gone, and has listed r's Presences; r's bridge, alive, rewrites its
// Presence before the janitor deletes it. The janitor must stop there:
// r's claim stays.
func testForgetRewrittenPresence(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node, janitor := newScopedStore(t, env.Config, ns), newStore(t, env.Config, ns)
	r := "r-" + ns
	cam, gate2 := storetest.Cam("", "porch", 2), storetest.Cam("", "gate", 1)
	observe(t, node, r, cam)
	c := instance.Claim{Instance: cam.Name, Slot: instance.SlotID(cam.Name, 0), Value: r}
	if err := node.Claim(t.Context(), []instance.Claim{c}); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, janitor, cam.Name, c.Slot, r, 5*time.Second)
	g := newGate()
	janitor.test.forgetPresences = func(string) { g.at() }
	done := make(chan error, 1)
	go func() {
		_, err := janitor.ForgetNode(t.Context(), r)
		done <- err
	}()
	g.wait(t)
	observe(t, node, r, cam, gate2)
	close(g.open)
	err := <-done
	t.Logf("ForgetNode(%s): %v", r, err)
	if v, _ := usageOf(t, janitor, cam.Name, c.Slot); v != r {
		t.Fatalf("slot %s of %s, whose bridge rewrote its Presence, is %q", c.Slot, r, v)
	}
}

// usageOf is the slot's value in the API server's copy.
func usageOf(t *testing.T, s *Store, name, slot string) (string, bool) {
	t.Helper()
	obj, err := s.client.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := toInstance(obj)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := in.Usage[slot]
	return v, ok
}

// failingOnce is a transport that fails the first request matching
// fails without sending it, as a connection that breaks would.
type failingOnce struct {
	rt    http.RoundTripper
	fails func(*http.Request) bool
	once  sync.Once
}

var errInjected = errors.New("injected: connection reset")

func (f *failingOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	failed := false
	if f.fails(req) {
		f.once.Do(func() { failed = true })
	}
	if failed {
		return nil, errInjected
	}
	return f.rt.RoundTrip(req)
}

// testWithdrawalRetried: node a withdraws pool cam (its drop-in is
// removed), and the deletion of its Presence fails. It is deleted later
// all the same.
func testWithdrawalRetried(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &failingOnce{rt: rt, fails: func(req *http.Request) bool {
			return req.Method == http.MethodDelete && strings.Contains(req.URL.Path, "/"+PresenceResource.Resource+"/")
		}}
	})
	node := newScopedStore(t, cfg, ns)
	observe(t, node, "a", storetest.Cam("", "x", 1))
	if err := node.Observe(t.Context(), "a", "cam", nil); !errors.Is(err, errInjected) {
		t.Fatalf("the withdrawal: %v, want the injected failure", err)
	}
	waitPresence(t, node, "a", "cam", false, nil)
}

// testCreationRetried: node a sees a new camera, and the creation of its
// Instance fails. It is created later all the same, without waiting for
// a's next discovery.
func testCreationRetried(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &failingOnce{rt: rt, fails: func(req *http.Request) bool {
			return req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/"+Resource.Resource)
		}}
	})
	node := newScopedStore(t, cfg, ns)
	x := storetest.Cam("", "x", 1)
	if err := node.Observe(t.Context(), "a", "cam", []instance.Instance{x}); !errors.Is(err, errInjected) {
		t.Fatalf("Observe: %v, want the injected failure", err)
	}
	for deadline := time.Now().Add(20 * time.Second); !exists(t, node, x.Name); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s, whose creation failed, is still missing after 20 s", x.Name)
		}
	}
}

// testStalePresenceDeleted: node a's bridge served pools cam and dog; it
// restarts without dog's drop-in. Its Presence of dog is deleted, that
// of cam kept.
func testStalePresenceDeleted(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	before, stop := stoppableStore(t, env.Config, ns, ServedPools)
	x := storetest.Cam("", "x", 1)
	observe(t, before, "a", x)
	if err := before.Observe(t.Context(), "a", "dog", []instance.Instance{dogOf("a", "rex")}); err != nil {
		t.Fatal(err)
	}
	stop()
	after := newScopedStore(t, env.Config, ns)
	after.orphanAfter = time.Second
	observe(t, after, "a", x)
	waitPresence(t, after, "a", "dog", false, nil)
	if _, ok := presenceDevices(t, after, "a", "cam"); !ok {
		t.Fatal("the Presence of the pool still served is gone")
	}
}

// testRetireDuringClaim: node a withdraws pool dog while a claim there is
// under way (paused before its write). The claim goes through: the pool
// must stay in a's view, so that the claim is released when its
// container ends.
func testRetireDuringClaim(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node := newScopedStore(t, env.Config, ns)
	rex := dogOf("a", "rex")
	if err := node.Observe(t.Context(), "a", "dog", []instance.Instance{rex}); err != nil {
		t.Fatal(err)
	}
	g := newGate()
	node.test.claimWrite = func(string) { g.at() }
	c := instance.Claim{Instance: rex.Name, Slot: instance.SlotID(rex.Name, 0), Value: "a"}
	claimed := make(chan error, 1)
	go func() { claimed <- node.Claim(t.Context(), []instance.Claim{c}) }()
	g.wait(t)
	withdrawn := make(chan error, 1)
	go func() { withdrawn <- node.Observe(t.Context(), "a", "dog", nil) }()
	// The withdrawal either ends, or waits for the claim; let the claim
	// go on in both cases.
	select {
	case <-withdrawn:
		withdrawn <- nil
	case <-time.After(2 * time.Second):
	}
	close(g.open)
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	if err := <-withdrawn; err != nil {
		t.Fatal(err)
	}
	if v, _ := usage(t, node, rex.Name, c.Slot); v != "a" {
		t.Fatalf("after pool dog was withdrawn during a claim there, a's view of %s is %q, want the claim", c.Slot, v)
	}
}

// testClaimAfterRetire: node a has withdrawn pool dog when a claim there
// comes (a kubelet's Allocate on a device plugin not stopped yet). The
// claim goes through, and is in a's view.
func testClaimAfterRetire(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node := newScopedStore(t, env.Config, ns)
	rex := dogOf("a", "rex")
	if err := node.Observe(t.Context(), "a", "dog", []instance.Instance{rex}); err != nil {
		t.Fatal(err)
	}
	if err := node.Observe(t.Context(), "a", "dog", nil); err != nil {
		t.Fatal(err)
	}
	c := instance.Claim{Instance: rex.Name, Slot: instance.SlotID(rex.Name, 0), Value: "a"}
	if err := node.Claim(t.Context(), []instance.Claim{c}); err != nil {
		t.Fatal(err)
	}
	if v, _ := usage(t, node, rex.Name, c.Slot); v != "a" {
		t.Fatalf("a claim in pool dog after it was withdrawn: a's view of %s is %q, want the claim", c.Slot, v)
	}
}

// testLegacyOfOtherPools: during a rollout from the release before the
// pool labels, the Instances of other pools are unlabelled too. Node a,
// serving pool cam, must not hold pool dog's in full; once it serves dog,
// its view shows them whole, their claims included.
func testLegacyOfOtherPools(t *testing.T, env *apitest.Env, _ kubernetes.Interface) {
	ns := env.Namespace(t)
	node := newScopedStore(t, env.Config, ns)
	observe(t, node, "a", storetest.Cam("", "x", 1))
	d1, d2 := dogOf("b", "d1"), dogOf("b", "d2")
	for _, d := range []instance.Instance{d1, d2} {
		d.Capacity = 2
		d.Usage = map[string]string{instance.SlotID(d.Name, 0): "old", instance.SlotID(d.Name, 1): ""}
		d.Properties = map[string]string{"serial": strings.Repeat("x", 200)}
		obj, err := toObject(d, ns)
		if err != nil {
			t.Fatal(err)
		}
		obj.SetLabels(nil)
		if _, err := node.client.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	held(t, node, d2.Name)
	for _, inf := range node.running() {
		for _, item := range inf.GetStore().List() {
			obj := item.(*unstructured.Unstructured)
			if spec, _, _ := unstructured.NestedMap(obj.Object, "spec"); spec["configurationName"] == "dog" && len(spec) > 1 {
				t.Fatalf("node a, serving pool cam only, holds pool dog's %s in full: %v", obj.GetName(), spec)
			}
		}
	}
	if err := node.Observe(t.Context(), "a", "dog", []instance.Instance{dogOf("a", "rex")}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []instance.Instance{d1, d2} {
		if v, _ := usage(t, node, d.Name, instance.SlotID(d.Name, 0)); v != "old" {
			t.Fatalf("serving pool dog, node a's view of %s's slot 0 is %q, want the old bridge's claim", d.Name, v)
		}
	}
}

// TestPresenceAtTheCap: a pool of the most devices a Presence may list,
// and one more that vanished while a container holds it (discovery keeps
// it until it is released). The Presence is written all the same, without
// the held one: a held Instance is never pruned.
func TestPresenceAtTheCap(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 5,001 Instances")
	}
	env := apitest.StartWithInstances(t, apitest.Options{})
	ns := env.Namespace(t)
	node := newScopedStore(t, env.Config, ns)
	seen := make([]instance.Instance, MaxPresenceDevices+1)
	for i := range seen {
		seen[i] = instance.Instance{Name: instance.Name("big", fmt.Sprintf("d%05d", i), "a", false), Config: "big",
			DeviceID: fmt.Sprintf("d%05d", i), Capacity: 1}
	}
	vanished := seen[len(seen)-1]
	createAll(t, node, seen)
	c := instance.Claim{Instance: vanished.Name, Slot: instance.SlotID(vanished.Name, 0), Value: "a"}
	// The first list of 5,001 Instances can take longer than an
	// Observe waits for it on a loaded machine; a bridge's next
	// discovery tries again, and so does the test.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := node.Observe(t.Context(), "a", "big", seen[:1])
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotListed) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if err := node.Claim(t.Context(), []instance.Claim{c}); err != nil {
		t.Fatal(err)
	}
	if err := node.Observe(t.Context(), "a", "big", seen); err != nil {
		t.Fatalf("observing %d devices, one of them vanished and held: %v", len(seen), err)
	}
	devices, _ := presenceDevices(t, node, "a", "big")
	if len(devices) != MaxPresenceDevices || slices.Contains(devices, vanished.Name) {
		t.Fatalf("the Presence lists %d devices (the held one: %v), want %d without it",
			len(devices), slices.Contains(devices, vanished.Name), MaxPresenceDevices)
	}
}

// createAll creates the Instances, slots free, 8 at a time.
func createAll(t *testing.T, s *Store, all []instance.Instance) {
	t.Helper()
	work := make(chan instance.Instance)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for in := range work {
				in.Usage = map[string]string{}
				in.Describe(in)
				obj, err := toObject(in, s.namespace)
				if err == nil {
					_, err = s.client.Create(t.Context(), obj, metav1.CreateOptions{})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for _, in := range all {
		select {
		case work <- in:
		case err := <-errs:
			t.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

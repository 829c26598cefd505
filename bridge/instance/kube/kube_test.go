package kube

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/storetest"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// TestStore runs the Store against one real API server: the contract
// every store keeps, then what only a store shared by nodes must do.
func TestStore(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	t.Run("contract", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) instance.Store { return newStore(t, env.Config, env.Namespace(t)) })
	})
	t.Run("race for the last slot", func(t *testing.T) { testRace(t, env) })
	t.Run("other writers' changes", func(t *testing.T) { testOtherWriters(t, env) })
	t.Run("nodes share an instance", func(t *testing.T) { testShared(t, env) })
	t.Run("a departed node is forgotten", func(t *testing.T) { testForgetNode(t, env) })
	t.Run("kubectl get prints which device and how busy", func(t *testing.T) { testTable(t, env) })
	t.Run("the informer keeps no managedFields", func(t *testing.T) { testNoManagedFields(t, env) })
}

// testNoManagedFields: the API server's copy of an Instance has
// managedFields; the informer's copy, which every bridge holds, has none.
func testNoManagedFields(t *testing.T, env *apitest.Env) {
	s := newStore(t, env.Config, env.Namespace(t))
	cam := storetest.Cam("a", "gate", 2)
	observe(t, s, "a", cam)
	obj, err := s.client.Get(t.Context(), cam.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(obj.GetManagedFields()) == 0 {
		t.Fatal("the API server's copy has no managedFields: the test proves nothing")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		item, ok, err := s.running()[0].GetStore().GetByKey(obj.GetNamespace() + "/" + cam.Name)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if mf := item.(*unstructured.Unstructured).GetManagedFields(); len(mf) > 0 {
				t.Fatalf("the informer's copy keeps %d managedFields entries", len(mf))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer never held the Instance")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newStore is a Store of every pool with a client of its own, as the
// bridge that clears departed nodes has, watching until the test ends.
func newStore(t *testing.T, cfg *rest.Config, namespace string) *Store {
	t.Helper()
	return startStore(t, cfg, namespace, AllPools)
}

// startStore is a Store of scope with a client of its own, watching until
// the test's cleanups, after its subtests.
func startStore(t *testing.T, cfg *rest.Config, namespace string, scope Scope) *Store {
	t.Helper()
	s, _ := stoppableStore(t, cfg, namespace, scope)
	return s
}

// stoppableStore is startStore, and a stop that ends the Store's
// informers and its keeping of its Presences before the test ends, as
// its bridge's exit does.
func stoppableStore(t *testing.T, cfg *rest.Config, namespace string, scope Scope) (*Store, func()) {
	t.Helper()
	client, err := dynamic.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	s, err := New(ctx, client, namespace, scope)
	if err != nil {
		t.Fatal(err)
	}
	return s, stop
}

// prune runs s's PruneUnseen without a grace period until it has deleted
// want Instances in all (s's view may lag the writes that free them); it
// fails the test if that takes over 5 s or deletes more.
func prune(t *testing.T, s *Store, want int) {
	t.Helper()
	deleted := 0
	for deadline := time.Now().Add(5 * time.Second); deleted < want && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n, err := s.PruneUnseen(t.Context(), 0, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
	}
	if deleted != want {
		t.Fatalf("PruneUnseen deleted %d, want %d", deleted, want)
	}
}

func observe(t *testing.T, s *Store, node string, seen ...instance.Instance) {
	t.Helper()
	if err := s.Observe(t.Context(), node, "cam", seen); err != nil {
		t.Fatal(err)
	}
}

// lookup is the named Instance in s's view, if there is one.
func lookup(t *testing.T, s *Store, name string) (instance.Instance, bool) {
	t.Helper()
	all, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if in.Name == name {
			return in, true
		}
	}
	return instance.Instance{}, false
}

// usage is the slot's value in s's view.
func usage(t *testing.T, s *Store, name, slot string) (string, bool) {
	t.Helper()
	in, ok := lookup(t, s, name)
	v, has := in.Usage[slot]
	return v, ok && has
}

// waitUsage waits until s's view of slot is want, and says how long that
// took; it fails the test after limit.
func waitUsage(t *testing.T, s *Store, name, slot, want string, limit time.Duration) time.Duration {
	t.Helper()
	ch, cancel := s.Changes()
	defer cancel()
	start := time.Now()
	deadline := time.After(limit)
	for {
		if v, ok := usage(t, s, name, slot); ok && v == want {
			return time.Since(start)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			v, _ := usage(t, s, name, slot)
			t.Fatalf("slot %s is %q after %v, want %q", slot, v, limit, want)
		}
	}
}

// testRace: four nodes claim the one slot of a shared camera at the same
// instant, 200 times. Exactly one wins each time, the others get
// ErrSlotTaken, and every loser's view shows the winner within a second.
func testRace(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	nodes := []string{"n0", "n1", "n2", "n3"}
	stores := make([]*Store, len(nodes))
	cam := storetest.Cam("n0", "gate", 1)
	for i, node := range nodes {
		stores[i] = newStore(t, env.Config, ns)
		observe(t, stores[i], node, cam)
	}
	slot := instance.SlotID(cam.Name, 0)
	for _, s := range stores {
		waitUsage(t, s, cam.Name, slot, "", 5*time.Second)
	}
	var slowest time.Duration
	wins := make([]int, len(nodes))
	const rounds = 200
	for round := range rounds {
		winner := raceOnce(t, stores, nodes, cam.Name, slot)
		if winner < 0 {
			t.Fatalf("round %d: no single winner", round)
		}
		wins[winner]++
		for i, s := range stores {
			if i != winner {
				slowest = max(slowest, waitUsage(t, s, cam.Name, slot, nodes[winner], time.Second))
			}
		}
		claim := instance.Claim{Instance: cam.Name, Slot: slot, Value: nodes[winner]}
		if err := stores[winner].Release(t.Context(), []instance.Claim{claim}); err != nil {
			t.Fatal(err)
		}
		for _, s := range stores {
			waitUsage(t, s, cam.Name, slot, "", 5*time.Second)
		}
	}
	var stats Stats
	for _, s := range stores {
		st := s.Stats()
		stats.Writes += st.Writes
		stats.Conflicts += st.Conflicts
	}
	t.Logf("%d rounds: wins per node %v; losers saw the winner within %v at the slowest; %d writes, %d conflicts",
		rounds, wins, slowest, stats.Writes, stats.Conflicts)
}

// raceOnce starts every store's claim at once and returns the index of
// the only winner, or -1 when there was not exactly one. Losers must fail
// with ErrSlotTaken.
func raceOnce(t *testing.T, stores []*Store, nodes []string, name, slot string) int {
	t.Helper()
	start := make(chan struct{})
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			<-start
			errs[i] = s.Claim(t.Context(), []instance.Claim{{Instance: name, Slot: slot, Value: nodes[i]}})
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner == -1:
			winner = i
		case err == nil:
			t.Errorf("both %s and %s won", nodes[winner], nodes[i])
			return -1
		case !errors.Is(err, instance.ErrSlotTaken):
			t.Errorf("%s: %v, want ErrSlotTaken", nodes[i], err)
		}
	}
	return winner
}

// testOtherWriters: an Instance changed by another writer between the
// Store's reads (its cache is then stale) is claimed without losing that
// writer's change, and the change reaches Changes and List.
func testOtherWriters(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	s := newStore(t, env.Config, ns)
	cam := storetest.Cam("n0", "dock", 2)
	observe(t, s, "n0", cam)
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw := client.Resource(Resource).Namespace(ns)
	slot := instance.SlotID(cam.Name, 0)
	for i := range 30 {
		// Another node's bridge takes slot 1, or gives it back.
		other := map[bool]string{true: "n9", false: ""}[i%2 == 0]
		setUsage(t, raw, cam.Name, instance.SlotID(cam.Name, 1), other)
		claim := instance.Claim{Instance: cam.Name, Slot: slot, Value: "n0"}
		if err := s.Claim(t.Context(), []instance.Claim{claim}); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		obj, err := raw.Get(t.Context(), cam.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "deviceUsage")
		if got[slot] != "n0" || got[instance.SlotID(cam.Name, 1)] != other {
			t.Fatalf("round %d: usage %v, want slot 0 n0 and slot 1 %q", i, got, other)
		}
		if err := s.Release(t.Context(), []instance.Claim{claim}); err != nil {
			t.Fatal(err)
		}
	}
	// The Store wrote last; a later write of another node's, seen only
	// through the informer, must both signal and replace that in its view.
	ch, cancel := s.Changes()
	defer cancel()
	setUsage(t, raw, cam.Name, instance.SlotID(cam.Name, 1), "n8")
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no change signal for another writer's update")
	}
	waitUsage(t, s, cam.Name, instance.SlotID(cam.Name, 1), "n8", 5*time.Second)
	t.Logf("stats: %+v", s.Stats())
}

// setUsage writes one slot's value as another bridge would, retrying its
// own conflicts.
func setUsage(t *testing.T, raw dynamic.ResourceInterface, name, slot, value string) {
	t.Helper()
	for range 20 {
		obj, err := raw.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(obj.Object, value, "spec", "deviceUsage", slot); err != nil {
			t.Fatal(err)
		}
		if _, err = raw.Update(t.Context(), obj, metav1.UpdateOptions{}); err == nil {
			return
		}
	}
	t.Fatalf("could not set %s of %s", slot, name)
}

// testShared: three nodes see one camera of capacity 2. Claims from every
// node together never exceed its capacity, a release on one is seen on
// the others, and the Instance goes when the last node stops seeing it.
func testShared(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	nodes := []string{"a", "b", "c"}
	cam := storetest.Cam("a", "yard", 2)
	stores := map[string]*Store{}
	for _, node := range nodes {
		stores[node] = newStore(t, env.Config, ns)
		observe(t, stores[node], node, cam)
	}
	s0, s1 := instance.SlotID(cam.Name, 0), instance.SlotID(cam.Name, 1)
	claim := func(node, slot, value string) error {
		return stores[node].Claim(t.Context(), []instance.Claim{{Instance: cam.Name, Slot: slot, Value: value}})
	}
	if err := claim("a", s0, "a"); err != nil {
		t.Fatal(err)
	}
	if err := claim("b", s1, instance.ConfigurationLevelUsage("0", "b")); err != nil {
		t.Fatal(err)
	}
	for _, slot := range []string{s0, s1} {
		if err := claim("c", slot, "c"); !errors.Is(err, instance.ErrSlotTaken) {
			t.Fatalf("c claimed %s of a full camera: %v", slot, err)
		}
	}
	if err := stores["a"].Release(t.Context(), []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, stores["c"], cam.Name, s0, "", 5*time.Second)
	if err := claim("c", s0, "c"); err != nil {
		t.Fatalf("c after a's release: %v", err)
	}
	// Get shows a store's own write at once, as List does.
	if in, err := stores["c"].Get(cam.Name); err != nil || in == nil || in.Usage[s0] != "c" {
		t.Fatalf("c's Get of %s after its claim: %+v, %v; want slot %s held by c", cam.Name, in, err, s0)
	}
	for _, node := range nodes {
		observe(t, stores[node], node)
	}
	if _, ok := usage(t, stores["a"], cam.Name, s0); !ok {
		t.Fatal("an Instance with live claims was deleted when its nodes stopped seeing it")
	}
	release := map[string]instance.Claim{"b": {Instance: cam.Name, Slot: s1, Value: instance.ConfigurationLevelUsage("0", "b")},
		"c": {Instance: cam.Name, Slot: s0, Value: "c"}}
	for node, c := range release {
		if err := stores[node].Release(t.Context(), []instance.Claim{c}); err != nil {
			t.Fatal(err)
		}
	}
	prune(t, stores["a"], 1)
	waitGone(t, stores["a"], cam.Name)
	if in, err := stores["a"].Get(cam.Name); err != nil || in != nil {
		t.Fatalf("Get of a deleted Instance: %+v, %v; want nil", in, err)
	}
}

func waitGone(t *testing.T, s *Store, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, ok := usage(t, s, name, name+"-0"); !ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("instance %s is still there", name)
}

// TestAPIServerRestart: while the API server is down, claims fail with
// a clear error, what the Store knew stays listed, and Stale says since
// when; once it is back, claims work again and a change made elsewhere
// reaches the Store's view within 5 s (client-go's informer alone took
// 1.3 to 58 s: its backoff reaches 30 s).
func TestAPIServerRestart(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	ns := env.Namespace(t)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	s, err := StartConfig(ctx, env.Config, ns, AllPools)
	if err == nil {
		err = s.Synced(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	scoped := newScopedStore(t, env.Config, ns)
	cam := storetest.Cam("n0", "door", 2)
	observe(t, s, "n0", cam)
	s0, s1 := instance.SlotID(cam.Name, 0), instance.SlotID(cam.Name, 1)
	if err := s.Claim(t.Context(), []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "n0"}}); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, s, cam.Name, s0, "n0", 5*time.Second)
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	claimCtx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	err = s.Claim(claimCtx, []instance.Claim{{Instance: cam.Name, Slot: s1, Value: "n0"}})
	cancel()
	if err == nil {
		t.Fatal("a claim succeeded with the API server down")
	}
	t.Logf("claim with the API server down: %v", err)
	if v, _ := usage(t, s, cam.Name, s0); v != "n0" {
		t.Fatalf("the claim made before the outage reads %q", v)
	}
	waitStale(t, s, true)
	// Long enough down that the informer's backoff has grown.
	before, down := s.Stats().Relists, time.Now()
	// A node's Store that starts serving a pool now cannot list it: its
	// Observe gives up after followWait (long enough down that the
	// informer's backoff has grown), and its List says what it lacks.
	dog := dogOf("n0", "rex")
	if err := scoped.Observe(t.Context(), "n0", "dog", []instance.Instance{dog}); !errors.Is(err, ErrNotListed) {
		t.Errorf("Observe of a new pool with the API server down: %v, want ErrNotListed", err)
	}
	if _, err := scoped.List(t.Context()); !errors.Is(err, ErrNotListed) {
		t.Errorf("List with a pool not listed: %v, want ErrNotListed", err)
	}
	// Listing twice a second, as the Store once did, is 40 lists in 20 s;
	// the jittered backoff's waits are at least 1, 2, 4 and 8 s long.
	if took := time.Since(down); took > 20*time.Second {
		t.Logf("%v down: too long to count lists", took)
	} else if n := s.Stats().Relists - before; n > 5 {
		t.Errorf("the Store listed %d times in %v with the API server down, want at most 5", n, took)
	} else {
		t.Logf("the Store listed %d times in %v with the API server down", n, took.Round(time.Second))
	}
	if err := env.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	client, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	setUsage(t, client.Resource(Resource).Namespace(ns), cam.Name, s1, "n7")
	// Within the informer's longest backoff, or the Store's next list.
	took := waitUsage(t, s, cam.Name, s1, "n7", 40*time.Second)
	t.Logf("a change made after the restart reached the Store's view after %v", took)
	waitStale(t, s, false)
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := scoped.List(t.Context())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool served during the outage is still not listed: %v", err)
		}
	}
	if err := s.Release(t.Context(), []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "n0"}}); err != nil {
		t.Fatalf("release after the restart: %v", err)
	}
	waitUsage(t, s, cam.Name, s0, "", 5*time.Second)
}

// waitStale waits until s.Stale says the view is (or is not) behind.
func waitStale(t *testing.T, s *Store, stale bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if since, _ := s.Stale(); since.IsZero() != stale {
			return
		}
	}
	since, err := s.Stale()
	t.Fatalf("Stale = %v, %v; want stale %v", since, err, stale)
}

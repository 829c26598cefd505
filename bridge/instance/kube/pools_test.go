package kube

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/storetest"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// TestServedPools runs a node's Store, which follows only the pools it
// serves, against a real API server: the contract every store keeps, and
// that it hears nothing of the pools it does not serve.
func TestServedPools(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	t.Run("contract", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) instance.Store { return newScopedStore(t, env.Config, env.Namespace(t)) })
	})
	t.Run("no event of a pool not served", func(t *testing.T) { testNoOtherPoolEvents(t, env) })
	t.Run("a pool served later, then withdrawn", func(t *testing.T) { testFollowPoolSet(t, env) })
	t.Run("an Instance without the label is labelled", func(t *testing.T) { testRelabel(t, env) })
	t.Run("a long pool name", func(t *testing.T) { testLongPoolName(t, env) })
}

// newScopedStore is a node's Store (ServedPools) with a client of its
// own, watching until the test ends.
func newScopedStore(t *testing.T, cfg *rest.Config, namespace string) *Store {
	t.Helper()
	return startStore(t, cfg, namespace, ServedPools)
}

func dogOf(node, id string) instance.Instance {
	return instance.Instance{Name: instance.Name("dog", id, node, false), Config: "dog", DeviceID: id, Capacity: 1}
}

// held waits until the informers of s hold the named Instance, so that
// the event of s's own write of it has come.
func held(t *testing.T, s *Store, name string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, inf := range s.running() {
			if _, ok, _ := inf.GetStore().GetByKey(s.key(name)); ok {
				return
			}
		}
	}
	t.Fatalf("the informers never held %s", name)
}

// claimAndRelease claims and releases slot 0 of in n times, through s.
func claimAndRelease(t *testing.T, s *Store, in instance.Instance, n int) {
	t.Helper()
	c := []instance.Claim{{Instance: in.Name, Slot: instance.SlotID(in.Name, 0), Value: "b"}}
	for range n {
		if err := s.Claim(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
}

// testNoOtherPoolEvents: node a serves pool cam; node b's 40 writes to
// an Instance of pool dog reach a's Store as no event, and b's one claim
// on a's camera as exactly one.
func testNoOtherPoolEvents(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	a, b := newScopedStore(t, env.Config, ns), newScopedStore(t, env.Config, ns)
	cam, dog := storetest.Cam("a", "gate", 1), dogOf("b", "rex")
	observe(t, a, "a", cam)
	if err := b.Observe(t.Context(), "b", "dog", []instance.Instance{dog}); err != nil {
		t.Fatal(err)
	}
	observe(t, b, "b", cam)
	held(t, a, cam.Name)
	before := a.Stats().Events
	claimAndRelease(t, b, dog, 20)
	slot := instance.SlotID(cam.Name, 0)
	if err := b.Claim(t.Context(), []instance.Claim{{Instance: cam.Name, Slot: slot, Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, a, cam.Name, slot, "b", 5*time.Second)
	// The informer's store holds the claim before its handler counts
	// the event: wait for the count, which then has every earlier event
	// of a's informers (each hands its events over in order).
	n := a.Stats().Events - before
	for deadline := time.Now().Add(5 * time.Second); n < 1 && time.Now().Before(deadline); n = a.Stats().Events - before {
		time.Sleep(10 * time.Millisecond)
	}
	if n != 1 {
		t.Errorf("node a heard %d events, want 1: its pool's claim, none of pool dog's 40 writes", n)
	}
	if _, ok := lookup(t, a, dog.Name); ok {
		t.Error("node a's view holds an Instance of pool dog")
	}
}

// testFollowPoolSet: a drop-in added on node a (pool dog served too)
// brings dog's Instances into a's view, node b's among them; withdrawn,
// they leave it, and b's writes to them are heard no more.
func testFollowPoolSet(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	a, b := newScopedStore(t, env.Config, ns), newScopedStore(t, env.Config, ns)
	rex := dogOf("b", "rex")
	if err := b.Observe(t.Context(), "b", "dog", []instance.Instance{rex}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(t, a, rex.Name); ok {
		t.Fatal("node a holds pool dog before serving it")
	}
	fido := dogOf("a", "fido")
	if err := a.Observe(t.Context(), "a", "dog", []instance.Instance{fido}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(t, a, rex.Name); !ok {
		t.Fatal("serving pool dog, node a does not see node b's Instance of it")
	}
	if err := a.Observe(t.Context(), "a", "dog", nil); err != nil {
		t.Fatal(err)
	}
	if all, err := a.List(t.Context()); err != nil || len(all) != 0 {
		t.Fatalf("after withdrawing pool dog, node a's view: %v, %v", all, err)
	}
	before := a.Stats().Events
	claimAndRelease(t, b, rex, 5)
	// An event would have come within this: b's writes took as long.
	time.Sleep(200 * time.Millisecond)
	if n := a.Stats().Events - before; n != 0 {
		t.Errorf("node a heard %d events of a pool it withdrew", n)
	}
}

// testRelabel: an Instance whose label is gone (as a bridge of the
// release before labels writes it, on every claim) stays in the view of a
// node serving its pool, and that node's next Observe writes it again,
// with the label.
func testRelabel(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	a, b := newScopedStore(t, env.Config, ns), newScopedStore(t, env.Config, ns)
	cam := storetest.Cam("b", "dock", 1)
	observe(t, b, "b", cam)
	observe(t, a, "a", cam)
	held(t, a, cam.Name)
	raw := b.client
	obj, err := raw.Get(t.Context(), cam.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.SetLabels(nil)
	slot := instance.SlotID(cam.Name, 0)
	if err := unstructured.SetNestedField(obj.Object, "old", "spec", "deviceUsage", slot); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Update(t.Context(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, a, cam.Name, slot, "old", 5*time.Second)
	observe(t, a, "a", cam)
	obj, err = raw.Get(t.Context(), cam.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.GetLabels()[LabelPool]; got != "cam" {
		t.Fatalf("label %s = %q after node a's Observe, want cam", LabelPool, got)
	}
	waitUsage(t, a, cam.Name, slot, "old", 5*time.Second)
}

// testLongPoolName: a pool whose name is no label value (over 63
// characters) is labelled with its hash, and followed.
func testLongPoolName(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	a := newScopedStore(t, env.Config, ns)
	pool := "tty-a-drop-in-with-a-name-far-longer-than-any-label-value-may-be-0123456789"
	in := instance.Instance{Name: instance.Name(pool, "t1", "a", false), Config: pool, DeviceID: "t1", Capacity: 1}
	if err := a.Observe(t.Context(), "a", pool, []instance.Instance{in}); err != nil {
		t.Fatal(err)
	}
	held(t, a, in.Name)
	if label := LabelValue(pool); len(label) > 63 || label == pool {
		t.Errorf("LabelValue(%q) = %q", pool, label)
	}
}

package kube

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
		{"the unseen clock starts again for a recreated Instance", testUnseenClockByUID},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, env, admin) })
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

// seesNone observes that node sees no device of pool cam (its Presence
// stays, empty), as a node whose camera was unplugged does.
func seesNone(t *testing.T, s *Store, node string) {
	t.Helper()
	if err := s.Observe(t.Context(), node, "cam", []instance.Instance{}); err != nil {
		t.Fatal(err)
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

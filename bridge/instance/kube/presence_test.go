package kube

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/storetest"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// TestPresence: who sees a device is recorded per node and pool, so that
// a shared Instance stays the same object however many nodes see it, a
// node joining writes a Presence per pool, a departed node costs its
// Presences and the Instances where it held slots, an Instance no node
// sees goes only after a grace period, and Instances of the release
// before are read and migrated in place.
func TestPresence(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	t.Run("a shared Instance does not grow with the nodes", func(t *testing.T) { testSharedSize(t, env) })
	t.Run("a node joining writes a Presence per pool", func(t *testing.T) { testJoinWrites(t, env) })
	t.Run("a departed node costs its Presences and its claims", func(t *testing.T) { testDepartedWrites(t, env) })
	t.Run("an unseen Instance goes after the grace period", func(t *testing.T) { testUnseenGrace(t, env) })
	t.Run("an Instance of the release before", func(t *testing.T) { testLegacyNodes(t, env) })
}

// cams are n shared cameras of pool "cam".
func cams(n int) []instance.Instance {
	out := make([]instance.Instance, n)
	for i := range out {
		out[i] = storetest.Cam("", fmt.Sprintf("cam%d", i), 2)
	}
	return out
}

// rawJSON is the API server's JSON of the named Instance.
func rawJSON(t *testing.T, s *Store, name string) []byte {
	t.Helper()
	obj, err := s.client.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testSharedSize: a camera seen by 1 node, then by 50: its Instance is
// byte for byte the same object (not even written again).
func testSharedSize(t *testing.T, env *apitest.Env) {
	s := newStore(t, env.Config, env.Namespace(t))
	cam := storetest.Cam("", "hall", 2)
	observe(t, s, "n0", cam)
	one := rawJSON(t, s, cam.Name)
	for i := 1; i < 50; i++ {
		observe(t, s, fmt.Sprintf("n%d", i), cam)
	}
	fifty := rawJSON(t, s, cam.Name)
	if string(one) != string(fifty) {
		t.Errorf("seen by 1 node: %d bytes, by 50: %d bytes\n%s\n%s", len(one), len(fifty), one, fifty)
	}
	t.Logf("a shared Instance seen by 1 node and by 50: %d bytes", len(fifty))
	waitNodes(t, s, cam.Name, nodeNames(50)...)
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i)
	}
	slices.Sort(out)
	return out
}

// testJoinWrites: with two pools of 5 shared cameras each in use by 3
// nodes, a fourth node's bridge joining writes its 2 Presences, nothing
// else; observing the same again writes nothing.
func testJoinWrites(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	dogs := make([]instance.Instance, 5)
	for i := range dogs {
		dogs[i] = instance.Instance{Name: instance.Name("dog", fmt.Sprintf("d%d", i), "", true), Config: "dog",
			DeviceID: fmt.Sprintf("d%d", i), Shared: true, Capacity: 1}
	}
	for _, node := range []string{"n1", "n2", "n3"} {
		s := newScopedStore(t, env.Config, ns)
		observe(t, s, node, cams(5)...)
		if err := s.Observe(t.Context(), node, "dog", dogs); err != nil {
			t.Fatal(err)
		}
	}
	joiner := newScopedStore(t, env.Config, ns)
	for range 2 {
		observe(t, joiner, "n4", cams(5)...)
		if err := joiner.Observe(t.Context(), "n4", "dog", dogs); err != nil {
			t.Fatal(err)
		}
	}
	if st := joiner.Stats(); st.Writes != 2 || st.Conflicts != 0 {
		t.Errorf("a node joining two pools of 5 shared devices wrote %d times (%d conflicts), want 2", st.Writes, st.Conflicts)
	}
}

// testDepartedWrites: node n1 sees two pools and holds one slot, and
// leaves (its bridge with it); clearing it is 2 Presence deletions and 1
// Instance write.
func testDepartedWrites(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	n1, gone := stoppableStore(t, env.Config, ns, ServedPools)
	all := cams(5)
	observe(t, n1, "n1", all...)
	dog := dogOf("n1", "rex")
	if err := n1.Observe(t.Context(), "n1", "dog", []instance.Instance{dog}); err != nil {
		t.Fatal(err)
	}
	c := instance.Claim{Instance: all[2].Name, Slot: instance.SlotID(all[2].Name, 1), Value: "n1"}
	if err := n1.Claim(t.Context(), []instance.Claim{c}); err != nil {
		t.Fatal(err)
	}
	janitor := newStore(t, env.Config, ns)
	waitUsage(t, janitor, c.Instance, c.Slot, "n1", 5*time.Second)
	waitNodes(t, janitor, dog.Name, "n1")
	gone()
	before := janitor.Stats().Writes
	if freed, err := janitor.ForgetNode(t.Context(), "n1"); freed != 1 || err != nil {
		t.Fatalf("ForgetNode(n1) freed %d, %v; want 1", freed, err)
	}
	if n := janitor.Stats().Writes - before; n != 3 {
		t.Errorf("clearing n1 wrote %d times, want 3: its 2 Presences and the Instance where it held a slot", n)
	}
	list, err := janitor.presenceClient.List(t.Context(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("Presences left: %d, %v", len(list.Items), err)
	}
}

// testUnseenGrace: an Instance unseen (its node's Presence withdrawn)
// goes only once unseen for the grace period; one seen again meanwhile
// stays, and its clock starts again.
func testUnseenGrace(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	s := newStore(t, env.Config, ns)
	gone, back := storetest.Cam("", "gone", 1), storetest.Cam("", "back", 1)
	observe(t, s, "n1", gone, back)
	observe(t, s, "n1")
	grace, t0 := time.Minute, time.Now()
	for _, step := range []struct {
		at      time.Duration
		observe []instance.Instance
		deleted int
	}{
		{0, nil, 0},
		{30 * time.Second, []instance.Instance{back}, 0},
		{61 * time.Second, []instance.Instance{}, 1},
		{100 * time.Second, nil, 0},
		{122 * time.Second, nil, 1},
	} {
		if step.observe != nil {
			observe(t, s, "n1", step.observe...)
		}
		n, err := s.PruneUnseen(t.Context(), grace, t0.Add(step.at))
		if n != step.deleted || err != nil {
			t.Fatalf("at %v: PruneUnseen deleted %d, %v; want %d", step.at, n, err, step.deleted)
		}
	}
	for _, in := range []instance.Instance{gone, back} {
		if _, err := s.client.Get(t.Context(), in.Name, metav1.GetOptions{}); err == nil {
			t.Errorf("%s is still there", in.Name)
		}
	}
}

// testLegacyNodes: an Instance as the release before wrote it (its nodes
// in spec.nodes, no pool label). Its nodes count as seeing it; a new
// bridge of one of them labels it and takes its own name out of it, and
// the Instance is not pruned while an old bridge's node is in it.
func testLegacyNodes(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	janitor := newStore(t, env.Config, ns)
	cam := storetest.Cam("", "legacy", 1)
	obj, err := toObject(instance.Instance{Name: cam.Name, Config: "cam", DeviceID: cam.DeviceID, Shared: true,
		Capacity: 1, Nodes: []string{"n1", "old"}, Usage: map[string]string{instance.SlotID(cam.Name, 0): ""}}, ns)
	if err != nil {
		t.Fatal(err)
	}
	obj.SetLabels(nil)
	if _, err := janitor.client.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, janitor, cam.Name, "n1", "old")
	observe(t, newScopedStore(t, env.Config, ns), "n1", cam)
	obj, err = janitor.client.Get(t.Context(), cam.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "nodes")
	if !slices.Equal(nodes, []string{"old"}) || obj.GetLabels()[LabelPool] != "cam" {
		t.Fatalf("after n1's new bridge observed it: spec.nodes %v, labels %v; want [old] and the pool's", nodes, obj.GetLabels())
	}
	waitNodes(t, janitor, cam.Name, "n1", "old")
	observe(t, newScopedStore(t, env.Config, ns), "n1")
	waitNodes(t, janitor, cam.Name, "old")
	if n, err := janitor.PruneUnseen(t.Context(), 0, time.Now()); n != 0 || err != nil {
		t.Fatalf("PruneUnseen deleted %d, %v; want none: node old still sees it", n, err)
	}
}

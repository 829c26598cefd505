package kube

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/storetest"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// testForgetNode: node a has left. Its claims at both levels are freed in
// a camera it shared with b, b's claim stays, a no longer sees the
// camera, and a's own device goes altogether. Two stores forgetting a at
// the same instant free each slot once between them, and forgetting it
// again frees nothing.
func testForgetNode(t *testing.T, env *apitest.Env) {
	ns := env.Namespace(t)
	a, b := newStore(t, env.Config, ns), newStore(t, env.Config, ns)
	cam := storetest.Cam("a", "porch", 3)
	local := instance.Instance{Name: instance.Name("cam", "tty", "a", false), Config: "cam", DeviceID: "tty", Capacity: 1}
	observe(t, a, "a", cam, local)
	observe(t, b, "b", cam)
	s0, s1, s2 := instance.SlotID(cam.Name, 0), instance.SlotID(cam.Name, 1), instance.SlotID(cam.Name, 2)
	claims := []instance.Claim{
		{Instance: cam.Name, Slot: s0, Value: "a"},
		{Instance: cam.Name, Slot: s1, Value: instance.ConfigurationLevelUsage("0", "a")},
		{Instance: local.Name, Slot: instance.SlotID(local.Name, 0), Value: "a"},
	}
	if err := a.Claim(t.Context(), claims); err != nil {
		t.Fatal(err)
	}
	if err := b.Claim(t.Context(), []instance.Claim{{Instance: cam.Name, Slot: s2, Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	janitors := []*Store{newStore(t, env.Config, ns), newStore(t, env.Config, ns)}
	for _, j := range janitors {
		waitUsage(t, j, cam.Name, s2, "b", 5*time.Second)
		waitUsage(t, j, local.Name, instance.SlotID(local.Name, 0), "a", 5*time.Second)
	}
	freed := make([]int, len(janitors))
	errs := make([]error, len(janitors))
	var wg sync.WaitGroup
	for i, j := range janitors {
		wg.Go(func() { freed[i], errs[i] = j.ForgetNode(t.Context(), "a") })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || freed[0]+freed[1] != len(claims) {
		t.Fatalf("racing ForgetNode(a): freed %v, errors %v; want %d freed in all", freed, errs, len(claims))
	}
	for slot, want := range map[string]string{s0: "", s1: "", s2: "b"} {
		waitUsage(t, b, cam.Name, slot, want, 5*time.Second)
	}
	waitNodes(t, janitors[0], cam.Name, "b")
	waitNodes(t, janitors[0], local.Name)
	prune(t, janitors[0], 1)
	waitGone(t, b, local.Name)
	for _, node := range []string{"a", "nobody"} {
		if n, err := janitors[0].ForgetNode(t.Context(), node); n != 0 || err != nil {
			t.Fatalf("ForgetNode(%s) again: freed %d, %v; want nothing", node, n, err)
		}
	}
}

// waitNodes waits until s's view of the named Instance says exactly
// nodes see it.
func waitNodes(t *testing.T, s *Store, name string, nodes ...string) {
	t.Helper()
	var in instance.Instance
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if in, _ = lookup(t, s, name); in.Name != "" && slices.Equal(in.Nodes, nodes) {
			return
		}
	}
	t.Fatalf("%s seen by %v, want %v", name, in.Nodes, nodes)
}

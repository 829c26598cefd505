// Package storetest is the contract every instance.Store must keep, as a
// test suite: each implementation's tests call Run with a constructor.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Pruner is a Store that deletes an Instance no node sees (and none of
// whose slots is held) only when asked, after a grace period: the
// Kubernetes store, whose elected bridge asks. Other stores delete it at
// once, in Observe or Release.
type Pruner interface {
	PruneUnseen(ctx context.Context, grace time.Duration, now time.Time) (deleted int, err error)
}

// Run runs the contract against stores made by newStore, one per subtest.
func Run(t *testing.T, newStore func(t *testing.T) instance.Store) {
	for name, test := range map[string]func(*testing.T, instance.Store){
		"ObserveCreatesFreeSlots":   observeCreates,
		"ClaimAllOrNothing":         claimAllOrNothing,
		"ReleaseOnlyOwnValue":       releaseOnlyOwn,
		"ResizeKeepsClaims":         resizeKeepsClaims,
		"NodeLeavesAndInstanceGoes": nodeLeaves,
		"ChangesFire":               changesFire,
	} {
		t.Run(name, func(t *testing.T) { test(t, newStore(t)) })
	}
}

// Cam returns the seen-record of a shared camera of pool "cam".
func Cam(node, id string, capacity int) instance.Instance {
	return instance.Instance{Name: instance.Name("cam", id, node, true), Config: "cam", DeviceID: id, Shared: true, Capacity: capacity}
}

func get(t *testing.T, s instance.Store, name string) *instance.Instance {
	t.Helper()
	all, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i]
		}
	}
	return nil
}

func observe(t *testing.T, s instance.Store, node string, seen ...instance.Instance) {
	t.Helper()
	if err := s.Observe(context.Background(), node, "cam", seen); err != nil {
		t.Fatal(err)
	}
}

func observeCreates(t *testing.T, s instance.Store) {
	cam := Cam("a", "lobby", 2)
	observe(t, s, "a", cam)
	observe(t, s, "b", cam)
	in := get(t, s, cam.Name)
	if in == nil || in.Capacity != 2 || len(in.Usage) != 2 || in.FreeSlots() != 2 || !in.Sees("a") || !in.Sees("b") || in.DeviceID != "lobby" {
		t.Fatalf("after Observe: %+v", in)
	}
}

func claimAllOrNothing(t *testing.T, s instance.Store) {
	ctx := context.Background()
	cam := Cam("a", "lobby", 2)
	observe(t, s, "a", cam)
	s0, s1 := instance.SlotID(cam.Name, 0), instance.SlotID(cam.Name, 1)
	if err := s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "a"}}); err != nil {
		t.Errorf("repeating a claim: %v", err)
	}
	err := s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: s1, Value: "b"}, {Instance: cam.Name, Slot: s0, Value: "b"}})
	if !errors.Is(err, instance.ErrSlotTaken) {
		t.Fatalf("claiming a taken slot: %v", err)
	}
	if v := get(t, s, cam.Name).Usage[s1]; v != "" {
		t.Errorf("a failed claim left slot 1 = %q", v)
	}
	if err := s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: cam.Name + "-7", Value: "a"}}); !errors.Is(err, instance.ErrNoSlot) {
		t.Errorf("claiming a missing slot: %v", err)
	}
}

func releaseOnlyOwn(t *testing.T, s instance.Store) {
	ctx := context.Background()
	cam := Cam("a", "lobby", 1)
	observe(t, s, "a", cam)
	s0 := instance.SlotID(cam.Name, 0)
	if err := s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "C:0:a"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	if v := get(t, s, cam.Name).Usage[s0]; v != "C:0:a" {
		t.Fatalf("a release with another value freed the slot: %q", v)
	}
	if err := s.Release(ctx, []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "C:0:a"}}); err != nil {
		t.Fatal(err)
	}
	if v := get(t, s, cam.Name).Usage[s0]; v != "" {
		t.Fatalf("slot still %q after its release", v)
	}
}

func resizeKeepsClaims(t *testing.T, s instance.Store) {
	ctx := context.Background()
	cam := Cam("a", "lobby", 3)
	observe(t, s, "a", cam)
	s2 := instance.SlotID(cam.Name, 2)
	if err := s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: s2, Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	cam.Capacity = 1
	observe(t, s, "a", cam)
	in := get(t, s, cam.Name)
	if in.Capacity != 1 || in.Usage[s2] != "a" || len(in.Usage) != 2 {
		t.Fatalf("after shrinking: %+v", in)
	}
	if err := s.Release(ctx, []instance.Claim{{Instance: cam.Name, Slot: s2, Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	if in := get(t, s, cam.Name); len(in.Usage) != 1 {
		t.Fatalf("a released slot above capacity stayed: %+v", in.Usage)
	}
	cam.Capacity = 4
	observe(t, s, "a", cam)
	if in := get(t, s, cam.Name); len(in.Usage) != 4 || in.FreeSlots() != 4 {
		t.Fatalf("after growing: %+v", in.Usage)
	}
}

func nodeLeaves(t *testing.T, s instance.Store) {
	ctx := context.Background()
	cam := Cam("a", "lobby", 1)
	observe(t, s, "a", cam)
	observe(t, s, "b", cam)
	s0 := instance.SlotID(cam.Name, 0)
	if err := s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	observe(t, s, "a")
	if in := get(t, s, cam.Name); in == nil || in.Sees("a") || !in.Sees("b") {
		t.Fatalf("after node a stops seeing it: %+v", in)
	}
	observe(t, s, "b")
	if get(t, s, cam.Name) == nil {
		t.Fatal("an instance with a live claim was deleted")
	}
	if err := s.Release(ctx, []instance.Claim{{Instance: cam.Name, Slot: s0, Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	if p, ok := s.(Pruner); ok {
		if n, err := p.PruneUnseen(ctx, 0, time.Now()); n != 1 || err != nil {
			t.Fatalf("PruneUnseen deleted %d, %v; want the one unseen Instance", n, err)
		}
	}
	if in := get(t, s, cam.Name); in != nil {
		t.Fatalf("an instance no node sees and nobody uses is still there: %+v", in)
	}
}

func changesFire(t *testing.T, s instance.Store) {
	ch, cancel := s.Changes()
	defer cancel()
	observe(t, s, "a", Cam("a", "lobby", 1))
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no change signal after Observe")
	}
}

package instance

import (
	"errors"
	"maps"
	"testing"
)

func cam(capacity int) Instance {
	return Instance{Name: "cam-1", Config: "cam", DeviceID: "lobby", Shared: true, Capacity: capacity}
}

func TestObserveResizes(t *testing.T) {
	tests := []struct {
		name      string
		usage     map[string]string
		capacity  int
		want      map[string]string
		wantNodes []string
	}{
		{"new", nil, 2, map[string]string{"cam-1-0": "", "cam-1-1": ""}, []string{"b"}},
		{"grow", map[string]string{"cam-1-0": "a"}, 3,
			map[string]string{"cam-1-0": "a", "cam-1-1": "", "cam-1-2": ""}, []string{"a", "b"}},
		{"shrink keeps a claim above capacity", map[string]string{"cam-1-0": "", "cam-1-1": "C:0:a", "cam-1-2": ""}, 1,
			map[string]string{"cam-1-0": "", "cam-1-1": "C:0:a"}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Instance{Name: "cam-1", Usage: maps.Clone(tt.usage)}
			if tt.usage != nil {
				in.Nodes = []string{"a"}
			}
			if !in.Observe("b", cam(tt.capacity)) {
				t.Fatal("Observe reported no change")
			}
			if !maps.Equal(in.Usage, tt.want) || len(in.Nodes) != len(tt.wantNodes) || in.Nodes[0] != tt.wantNodes[0] {
				t.Fatalf("usage %v nodes %v; want %v %v", in.Usage, in.Nodes, tt.want, tt.wantNodes)
			}
			if in.Observe("b", cam(tt.capacity)) {
				t.Fatal("a second identical Observe reported a change")
			}
		})
	}
}

func TestClaimAndRelease(t *testing.T) {
	in := cam(2)
	in.Observe("a", cam(2))
	il, cl := Claim{Slot: "cam-1-0", Value: "a"}, Claim{Slot: "cam-1-0", Value: "C:3:b"}
	if changed, err := in.Apply(il); !changed || err != nil {
		t.Fatalf("first claim: %v %v", changed, err)
	}
	if changed, err := in.Apply(il); changed || err != nil {
		t.Fatalf("repeated claim: changed %v, %v; want no change and no error", changed, err)
	}
	if _, err := in.Apply(cl); !errors.Is(err, ErrSlotTaken) {
		t.Fatalf("claim of a held slot: %v, want ErrSlotTaken", err)
	}
	if _, err := in.Apply(Claim{Slot: "cam-1-9", Value: "a"}); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("claim of a missing slot: %v, want ErrNoSlot", err)
	}
	if in.Release(cl) || in.Usage["cam-1-0"] != "a" {
		t.Fatal("a release with another value freed the slot")
	}
	if !in.Release(il) || in.Usage["cam-1-0"] != "" {
		t.Fatal("the holder's release did not free the slot")
	}
}

func TestReleaseAboveCapacityDropsSlot(t *testing.T) {
	in := Instance{Name: "cam-1", Nodes: []string{"a"}, Usage: map[string]string{"cam-1-0": "", "cam-1-1": "a"}}
	in.Observe("a", cam(1))
	if _, ok := in.Usage["cam-1-1"]; !ok {
		t.Fatal("shrink dropped a held slot")
	}
	in.Release(Claim{Slot: "cam-1-1", Value: "a"})
	if _, ok := in.Usage["cam-1-1"]; ok || len(in.Usage) != 1 {
		t.Fatalf("released slot above capacity kept: %v", in.Usage)
	}
}

func TestForgetAndUnused(t *testing.T) {
	in := cam(1)
	in.Observe("a", cam(1))
	in.Observe("b", cam(1))
	in.Apply(Claim{Slot: "cam-1-0", Value: "a"})
	if !in.Forget("a") || in.Forget("a") || in.Unused() {
		t.Fatalf("after Forget(a): nodes %v, unused %v", in.Nodes, in.Unused())
	}
	in.Forget("b")
	if in.Unused() {
		t.Fatal("an Instance with a held slot is unused")
	}
	in.Release(Claim{Slot: "cam-1-0", Value: "a"})
	if !in.Unused() {
		t.Fatal("no nodes and no claims, yet not unused")
	}
}

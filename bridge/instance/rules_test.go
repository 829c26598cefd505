package instance

import (
	"errors"
	"maps"
	"slices"
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

func TestForgetNodeClaims(t *testing.T) {
	tests := []struct {
		name        string
		nodes       []string
		usage       map[string]string
		capacity    int
		node        string
		wantFreed   int
		wantChanged bool
		wantNodes   []string
		wantUsage   map[string]string
	}{
		{"both levels freed, others kept", []string{"a", "b"},
			map[string]string{"cam-1-0": "a", "cam-1-1": "C:0:a", "cam-1-2": "b", "cam-1-3": "C:1:b"}, 4, "a",
			2, true, []string{"b"},
			map[string]string{"cam-1-0": "", "cam-1-1": "", "cam-1-2": "b", "cam-1-3": "C:1:b"}},
		{"only seen, no claims", []string{"a", "b"}, map[string]string{"cam-1-0": "b"}, 1, "a",
			0, true, []string{"b"}, map[string]string{"cam-1-0": "b"}},
		{"claims of a node that no longer sees it", []string{"b"}, map[string]string{"cam-1-0": "C:3:a"}, 1, "a",
			1, true, []string{"b"}, map[string]string{"cam-1-0": ""}},
		{"a freed slot above capacity is dropped", []string{"a"}, map[string]string{"cam-1-0": "", "cam-1-1": "a"}, 1, "a",
			1, true, []string{}, map[string]string{"cam-1-0": ""}},
		{"a name that only shares a prefix", []string{"ab"}, map[string]string{"cam-1-0": "ab", "cam-1-1": "C:a:ab"}, 2, "a",
			0, false, []string{"ab"}, map[string]string{"cam-1-0": "ab", "cam-1-1": "C:a:ab"}},
		{"malformed usage left alone", []string{"b"}, map[string]string{"cam-1-0": "x:a"}, 1, "a",
			0, false, []string{"b"}, map[string]string{"cam-1-0": "x:a"}},
		{"empty node name", []string{"b"}, map[string]string{"cam-1-0": ""}, 1, "",
			0, false, []string{"b"}, map[string]string{"cam-1-0": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Instance{Name: "cam-1", Capacity: tt.capacity, Nodes: slices.Clone(tt.nodes), Usage: maps.Clone(tt.usage)}
			freed, changed := in.ForgetNodeClaims(tt.node)
			if freed != tt.wantFreed || changed != tt.wantChanged {
				t.Fatalf("freed %d changed %v; want %d %v", freed, changed, tt.wantFreed, tt.wantChanged)
			}
			if !slices.Equal(in.Nodes, tt.wantNodes) || !maps.Equal(in.Usage, tt.wantUsage) {
				t.Fatalf("nodes %v usage %v; want %v %v", in.Nodes, in.Usage, tt.wantNodes, tt.wantUsage)
			}
			if freed, changed := in.ForgetNodeClaims(tt.node); freed != 0 || changed {
				t.Fatalf("a second ForgetNodeClaims freed %d, changed %v; want nothing", freed, changed)
			}
		})
	}
}

func TestNodeNames(t *testing.T) {
	tests := []struct {
		name  string
		nodes []string
		usage map[string]string
		want  []string
	}{
		{"none", nil, map[string]string{"cam-1-0": ""}, nil},
		{"seen and claiming, once each", []string{"b", "a"},
			map[string]string{"cam-1-0": "a", "cam-1-1": "C:0:c", "cam-1-2": "C:1:c", "cam-1-3": ""}, []string{"a", "b", "c"}},
		{"malformed usage names no one", []string{"a"}, map[string]string{"cam-1-0": "x:y"}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Instance{Name: "cam-1", Nodes: tt.nodes, Usage: tt.usage}
			if got := in.NodeNames(); !slices.Equal(got, tt.want) {
				t.Fatalf("NodeNames() = %v, want %v", got, tt.want)
			}
		})
	}
}

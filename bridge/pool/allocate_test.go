package pool

import (
	"errors"
	"reflect"
	"testing"

	"github.com/cdiexec/cdi/bridge/instance"
)

func TestAllocate(t *testing.T) {
	vdev3 := map[string]string{"cam-b-1": "C:3:n1"}
	claim := func(in, slot, vdev string) instance.Claim {
		return instance.Claim{Instance: in, Slot: slot, Value: instance.ConfigurationLevelUsage(vdev, "n1")}
	}
	tests := []struct {
		name     string
		usage    map[string]string
		requests [][]string
		want     [][]instance.Claim // nil: denied
	}{
		// The proposal: "0" and "3" in one container request map "0" to
		// akri-onvif-8120fe (the most free slots) and "3" to its previous claim.
		{"proposal [0 3]", vdev3, [][]string{{"0", "3"}},
			[][]instance.Claim{{claim("cam-a", "cam-a-0", "0"), claim("cam-b", "cam-b-1", "3")}}},
		// "0", "1" and "3" in one request: only 2 cameras, denied.
		{"proposal [0 1 3]", vdev3, [][]string{{"0", "1", "3"}}, nil},
		// "0" and "1" in one request and "3" in another: "1" goes to the
		// other camera (unique instance), "3" keeps its claim.
		{"proposal [0 1] + [3]", vdev3, [][]string{{"0", "1"}, {"3"}},
			[][]instance.Claim{{claim("cam-a", "cam-a-0", "0"), claim("cam-b", "cam-b-0", "1")}, {claim("cam-b", "cam-b-1", "3")}}},
		// Two claimed vdevs on one camera requested together: denied, as
		// the proposal says of "0" and "1" mapping to the same camera.
		{"claimed vdevs share a camera", map[string]string{"cam-a-0": "C:0:n1", "cam-a-1": "C:1:n1"}, [][]string{{"0", "1"}}, nil},
		// A vdev this node claims, requested again (a re-created pod): accepted.
		{"re-request of a claim", vdev3, [][]string{{"3"}}, [][]instance.Claim{{claim("cam-b", "cam-b-1", "3")}}},
		// Slots taken by an earlier container request are not free later.
		{"three single requests", nil, [][]string{{"0"}, {"1"}, {"2"}},
			[][]instance.Claim{{claim("cam-a", "cam-a-0", "0")}, {claim("cam-b", "cam-b-0", "1")}, {claim("cam-a", "cam-a-1", "2")}}},
		{"five single requests", nil, [][]string{{"0"}, {"1"}, {"2"}, {"3"}, {"4"}}, nil},
		// Another node's claims leave cam-b one free slot, cam-a two.
		{"other node's claims", map[string]string{"cam-b-0": "n2"}, [][]string{{"0"}, {"1"}},
			[][]instance.Claim{{claim("cam-a", "cam-a-0", "0")}, {claim("cam-a", "cam-a-1", "1")}}},
		{"same vdev twice in a request", nil, [][]string{{"0", "0"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Pool{Node: "n1", Instances: cameras(tt.usage)}
			got, err := p.Allocate(tt.requests)
			if tt.want == nil {
				if !errors.Is(err, ErrUnavailable) || got != nil {
					t.Fatalf("Allocate = %v, %v; want a denial", got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Allocate = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestAllocateSkipsUnusableInstances(t *testing.T) {
	ins := cameras(nil)
	ins[0].Nodes = []string{"n2"}
	p := Pool{Node: "n1", Instances: append(ins, cameras(nil)[1]), Unhealthy: map[string]bool{}}
	p.Instances[2].Name = "cam-c"
	p.Unhealthy["cam-c"] = true
	got, err := p.Allocate([][]string{{"0"}})
	if err != nil || got[0][0].Instance != "cam-b" {
		t.Fatalf("Allocate = %v, %v; want cam-b, the only visible healthy camera", got, err)
	}
}

func TestInstanceLevel(t *testing.T) {
	in := cameras(map[string]string{"cam-a-0": "n1", "cam-a-1": "C:0:n1"})[0]
	p := Pool{Node: "n1"}
	want := []VDev{{ID: "cam-a-0", Slot: "cam-a-0", Healthy: true}, {ID: "cam-a-1", Slot: "cam-a-1", Healthy: false}}
	if got := p.InstanceLevel(&in); !reflect.DeepEqual(got, want) {
		t.Errorf("InstanceLevel = %+v, want %+v", got, want)
	}
	in.Usage["cam-a-1"] = ""
	p.Unhealthy = map[string]bool{"cam-a": true}
	for _, v := range p.InstanceLevel(&in) {
		if v.Healthy {
			t.Errorf("slot %s healthy on an unhealthy device", v.ID)
		}
	}
}

// Nodes facing equally free shared devices do not all pick the same one:
// each has an order of its own, so racing nodes rarely collide. Devices
// of one node alone keep the name order.
func TestAllocateSpreadsNodesOverSharedTies(t *testing.T) {
	devices := func(shared bool) []instance.Instance {
		var out []instance.Instance
		for _, id := range []string{"a", "b", "c", "d"} {
			out = append(out, instance.Instance{Name: "cam-" + id, DeviceID: id, Capacity: 1, Shared: shared})
		}
		return out
	}
	first := func(node string, shared bool) string {
		ins := devices(shared)
		for i := range ins {
			ins[i].Nodes = []string{node}
		}
		claims, err := (&Pool{Node: node, Instances: ins}).Allocate([][]string{{"0"}})
		if err != nil {
			t.Fatal(err)
		}
		return claims[0][0].Instance
	}
	shared, local := map[string]bool{}, map[string]bool{}
	for _, node := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		shared[first(node, true)] = true
		local[first(node, false)] = true
	}
	if len(shared) < 3 {
		t.Errorf("six nodes chose %v among four equally free shared cameras, want at least three different", shared)
	}
	if len(local) != 1 || !local["cam-a"] {
		t.Errorf("node-local devices chosen %v, want cam-a, the first by name, on every node", local)
	}
}

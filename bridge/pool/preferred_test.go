package pool

import (
	"reflect"
	"testing"

	"github.com/cdiexec/cdi/bridge/instance"
)

func TestPrefer(t *testing.T) {
	vdev3 := map[string]string{"cam-b-1": "C:3:n1"}
	allClaimed := map[string]string{"cam-a-0": "C:0:n1", "cam-a-1": "C:1:n1", "cam-b-0": "C:2:n1", "cam-b-1": "C:3:n1"}
	tests := []struct {
		name            string
		usage           map[string]string
		unhealthy       string
		available, must []string
		size            int
		want            []string
	}{
		// All free: two placeholders, one per camera.
		{"all free", nil, "", []string{"0", "1"}, nil, 2, []string{"0", "1"}},
		// The proposal: with every slot claimed, the kubelet may pick "0"
		// and "1", which map to one camera, and be denied; the preference
		// steers it to "0" and "2", one slot of each camera.
		{"proposal: all four claimed", allClaimed, "", []string{"0", "1", "2", "3"}, nil, 2, []string{"0", "2"}},
		// The proposal: "3" is the only slot used, "0", "1" and "3" are
		// advertised. The claim is reused and one placeholder added.
		{"proposal: 3 claimed", vdev3, "", []string{"0", "1", "3"}, nil, 2, []string{"3", "0"}},
		// "0", "1" and "3" in one request would be denied: two cameras only.
		{"proposal: 3 claimed, three wanted", vdev3, "", []string{"0", "1", "3"}, nil, 3, []string{"3", "0"}},
		{"available in any order", vdev3, "", []string{"3", "1", "0"}, nil, 2, []string{"3", "0"}},
		{"numeric order", nil, "", []string{"10", "9"}, nil, 1, []string{"9"}},
		// A placeholder the kubelet must include keeps an instance for itself.
		{"must include a placeholder", vdev3, "", []string{"0", "1", "3"}, []string{"1"}, 2, []string{"1", "3"}},
		// cam-b is another node's; the must-include placeholder needs
		// cam-a, so vdev 5, cam-a's claim, cannot join it.
		{"placeholder's instance not given away", map[string]string{"cam-a-0": "C:5:n1", "cam-b-0": "n2", "cam-b-1": "n2"}, "",
			[]string{"0", "5"}, []string{"0"}, 2, []string{"0"}},
		// A must-include claim pins cam-a: vdev 1, also on cam-a, is passed over.
		{"must include a claim", map[string]string{"cam-a-0": "C:0:n1", "cam-a-1": "C:1:n1"}, "",
			[]string{"0", "1", "2"}, []string{"0"}, 2, []string{"0", "2"}},
		{"size met by must include", allClaimed, "", []string{"0", "1", "2", "3"}, []string{"3", "1"}, 2, []string{"3", "1"}},
		{"unhealthy camera gets no placeholder", nil, "cam-b", []string{"0", "1"}, nil, 2, []string{"0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Pool{Node: "n1", Instances: cameras(tt.usage), Unhealthy: map[string]bool{tt.unhealthy: true}}
			got := p.Prefer(tt.available, tt.must, tt.size)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Prefer(%v, %v, %d) = %v, want %v", tt.available, tt.must, tt.size, got, tt.want)
			}
			// A full preference is one Allocate grants.
			if len(got) == tt.size {
				if _, err := p.Allocate([][]string{got}); err != nil {
					t.Errorf("Allocate of the preference %v: %v", got, err)
				}
			}
		})
	}
}

// numaPool has four capacity-1 instances, each claimed by n1 as vdev
// "<i>"; the even ones sit on NUMA node 0, the odd ones on node 1.
func numaPool(withNUMA bool) Pool {
	p := Pool{Node: "n1", NUMA: map[string]int{}}
	for i, name := range []string{"d0", "d1", "d2", "d3"} {
		slot := instance.SlotID(name, 0)
		p.Instances = append(p.Instances, instance.Instance{Name: name, Capacity: 1, Nodes: []string{"n1"},
			Usage: map[string]string{slot: instance.ConfigurationLevelUsage(string(rune('0'+i)), "n1")}})
		if withNUMA {
			p.NUMA[name] = i % 2
		}
	}
	return p
}

func TestPreferNUMA(t *testing.T) {
	all := []string{"0", "1", "2", "3"}
	tests := []struct {
		name     string
		withNUMA bool
		must     []string
		size     int
		want     []string
	}{
		{"must include on node 1", true, []string{"1"}, 2, []string{"1", "3"}},
		{"must include on node 0", true, []string{"2"}, 3, []string{"2", "0", "1"}},
		{"no NUMA known", false, []string{"1"}, 2, []string{"1", "0"}},
		{"nothing to be near", true, nil, 2, []string{"0", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := numaPool(tt.withNUMA)
			if got := p.Prefer(all, tt.must, tt.size); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Prefer(%v, %d) = %v, want %v", tt.must, tt.size, got, tt.want)
			}
		})
	}
}

package pool

import (
	"reflect"
	"testing"

	"github.com/cdiexec/cdi/bridge/instance"
)

// cameras is the proposal's example: two cameras of one configuration,
// capacity 2, seen by node n1; usage sets slots as "cam-a-0": "C:3:n1".
func cameras(usage map[string]string) []instance.Instance {
	mk := func(name string) instance.Instance {
		in := instance.Instance{Name: name, Config: "cam", Capacity: 2, Nodes: []string{"n1", "n2"}, Usage: map[string]string{}}
		for _, s := range in.Slots() {
			in.Usage[s] = usage[s]
		}
		return in
	}
	return []instance.Instance{mk("cam-a"), mk("cam-b")}
}

func ids(v []VDev) []string {
	var out []string
	for _, d := range v {
		out = append(out, d.ID)
	}
	return out
}

func TestAdvertise(t *testing.T) {
	tests := []struct {
		name  string
		usage map[string]string
		want  []string
	}{
		// "if all slots from 2 cameras are free, the Configuration device
		// plugin reports 2 virtual devices "0" and "1"".
		{"all free", nil, []string{"0", "1"}},
		// "if akri-onvif-8120fe-1 had been claimed ... as virtual device id
		// "4" and all other 3 slots are free, ... reports "0", "1", and "4"".
		{"vdev 4 claimed", map[string]string{"cam-a-1": "C:4:n1"}, []string{"0", "1", "4"}},
		// "assume "3" ... is the only slot being used ... reports "0", "1" and "3"".
		{"vdev 3 claimed", map[string]string{"cam-b-1": "C:3:n1"}, []string{"0", "1", "3"}},
		// Every slot claimed by this node: all four are advertised.
		{"all claimed", map[string]string{"cam-a-0": "C:0:n1", "cam-a-1": "C:1:n1", "cam-b-0": "C:2:n1", "cam-b-1": "C:3:n1"}, []string{"0", "1", "2", "3"}},
		// Another node's claims are not this node's vdevs; a full camera
		// offers no placeholder.
		{"other node holds cam-b", map[string]string{"cam-b-0": "C:0:n2", "cam-b-1": "n2"}, []string{"0"}},
		// This node's IL claim is not a CL vdev.
		{"own IL claim", map[string]string{"cam-a-0": "n1", "cam-a-1": "n1"}, []string{"0"}},
		// A placeholder takes the lowest number no claimed vdev uses.
		{"claimed 0 and 2", map[string]string{"cam-a-0": "C:0:n1", "cam-b-0": "C:2:n1"}, []string{"0", "1", "2", "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Pool{Node: "n1", Instances: cameras(tt.usage)}
			if got := ids(p.Advertise()); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Advertise = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAdvertiseHealthAndVisibility(t *testing.T) {
	ins := cameras(map[string]string{"cam-a-0": "C:7:n1"})
	ins[1].Nodes = []string{"n2"} // cam-b is out of n1's reach
	p := Pool{Node: "n1", Instances: ins, Unhealthy: map[string]bool{"cam-a": true}}
	want := []VDev{{ID: "7", Slot: "cam-a-0", Healthy: false}}
	if got := p.Advertise(); !reflect.DeepEqual(got, want) {
		t.Errorf("Advertise = %+v, want %+v", got, want)
	}
}

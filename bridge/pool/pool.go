package pool

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/cdiexec/cdi/bridge/instance"
)

// ErrUnavailable is wrapped when a request cannot be met.
var ErrUnavailable = errors.New("not enough distinct devices")

// VDev is one id a device plugin advertises.
type VDev struct {
	ID      string
	Healthy bool
	// Slot is the slot a Configuration-level vdev holds; "" for a
	// placeholder, which gets its slot at Allocate.
	Slot string
}

// Pool is the instances of one configuration as one node sees them.
type Pool struct {
	Node      string
	Instances []instance.Instance
	// Unhealthy names the instances whose device is unhealthy here: they
	// get no new claims and their vdevs are advertised unhealthy.
	Unhealthy map[string]bool
	// NUMA maps an instance to the NUMA node of its device, for the
	// devices that report one; Prefer keeps a choice on one node.
	NUMA map[string]int
}

// claimed maps the vdevs this node claims in the pool to their slots.
func (p *Pool) claimed() map[string]slotRef {
	out := map[string]slotRef{}
	for i := range p.Instances {
		in := &p.Instances[i]
		for slot, v := range in.Usage {
			u, err := instance.ParseUsage(v)
			if err == nil && u.Kind == instance.ConfigLevel && u.Node == p.Node {
				out[u.VDev] = slotRef{instance: in.Name, slot: slot}
			}
		}
	}
	return out
}

type slotRef struct{ instance, slot string }

// usable reports whether new claims may go to in.
func (p *Pool) usable(in *instance.Instance) bool {
	return in.Sees(p.Node) && !p.Unhealthy[in.Name] && in.FreeSlots() > 0
}

// Advertise returns the Configuration-level vdevs, sorted by number: those
// this node claims, and one placeholder per usable instance, numbered with
// the lowest integers that no claimed vdev uses.
func (p *Pool) Advertise() []VDev {
	claimed := p.claimed()
	var out []VDev
	for id, ref := range claimed {
		out = append(out, VDev{ID: id, Slot: ref.slot, Healthy: !p.Unhealthy[ref.instance]})
	}
	next := 0
	for i := range p.Instances {
		if !p.usable(&p.Instances[i]) {
			continue
		}
		for ; claimed[strconv.Itoa(next)] != (slotRef{}); next++ {
		}
		out = append(out, VDev{ID: strconv.Itoa(next), Healthy: true})
		next++
	}
	sortVDevs(out)
	return out
}

func sortVDevs(v []VDev) {
	sort.Slice(v, func(i, j int) bool {
		a, errA := strconv.Atoi(v[i].ID)
		b, errB := strconv.Atoi(v[j].ID)
		if errA != nil || errB != nil {
			return v[i].ID < v[j].ID
		}
		return a < b
	})
}

// InstanceLevel returns the slots of in as its Instance-level plugin
// advertises them: healthy when the device is and the slot is free or held
// by this node's Instance-level plugin; unhealthy when anyone else holds
// it, this node's Configuration-level plugin included.
func (p *Pool) InstanceLevel(in *instance.Instance) []VDev {
	out := make([]VDev, 0, in.Capacity)
	for _, slot := range in.Slots() {
		v := in.Usage[slot]
		ok := v == "" || v == instance.InstanceLevelUsage(p.Node)
		out = append(out, VDev{ID: slot, Slot: slot, Healthy: ok && !p.Unhealthy[in.Name] && in.Sees(p.Node)})
	}
	return out
}

func describe(ids []string) string { return fmt.Sprintf("%q", ids) }

package discovery

import (
	"sort"

	"github.com/cdiexec/cdi/spec/invoke"
)

// carry compares a drop-in's new pools with its previous run's: it logs
// each device that appeared, came back or vanished (one line per device,
// however many events its node made), and keeps among the pools, unhealthy
// and named in Vanished, each vanished device that Keep says to keep. A
// pool left with only such devices stays too. A pool the previous run did
// not have is compared with an empty one: the first device of a pool
// appears like any other.
func (d *Discoverer) carry(c *invoke.Conf, p *invoke.Plugin, prev, pools []Pool) []Pool {
	byName := make(map[string]bool, len(pools))
	for _, pl := range pools {
		byName[pl.Name] = true
	}
	before := make(map[string]Pool, len(prev))
	for _, old := range prev {
		before[old.Name] = old
		if !byName[old.Name] {
			pools = append(pools, Pool{Name: old.Name, Resource: old.Resource, Conf: c, Plugin: p})
		}
	}
	out := pools[:0]
	for _, pl := range pools {
		if pl = d.carryPool(before[pl.Name], pl); len(pl.Devices) > 0 {
			out = append(out, pl)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// carryPool is cur, pool old's devices as INFO lists them now, with the
// vanished devices kept.
func (d *Discoverer) carryPool(old, cur Pool) Pool {
	listed := make(map[string]bool, len(cur.Devices))
	for _, dev := range cur.Devices {
		listed[dev.ID] = true
	}
	known := make(map[string]bool, len(old.Devices))
	for _, dev := range old.Devices {
		known[dev.ID] = true
		if listed[dev.ID] {
			if old.Vanished[dev.ID] {
				d.log().Info("device is back", "pool", cur.Name, "device", dev.ID)
			}
			continue
		}
		keep := d.Keep != nil && d.Keep(cur.Name, dev)
		switch {
		case keep && !old.Vanished[dev.ID]:
			d.log().Info("device vanished; kept, unhealthy, while a container holds it", "pool", cur.Name, "device", dev.ID)
		case !keep && old.Vanished[dev.ID]:
			d.log().Info("vanished device no longer held; withdrawn", "pool", cur.Name, "device", dev.ID)
		case !keep:
			d.log().Info("device vanished", "pool", cur.Name, "device", dev.ID)
		}
		if keep {
			dev.Healthy = false
			cur.Devices = append(cur.Devices, dev)
			if cur.Vanished == nil {
				cur.Vanished = map[string]bool{}
			}
			cur.Vanished[dev.ID] = true
		}
	}
	for _, dev := range cur.Devices {
		if !known[dev.ID] {
			d.log().Info("device appeared", "pool", cur.Name, "device", dev.ID)
		}
	}
	return cur
}

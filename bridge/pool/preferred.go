package pool

import (
	"sort"
	"strconv"
)

// Prefer answers the kubelet's GetPreferredAllocation for one container
// request: which size vdevs of available it should pick, so that the
// Allocate that follows can be met. The v1beta1 request carries no
// topology, so NUMA locality is judged from the devices themselves.
//
// The choice is mustInclude (always, first), then vdevs this node already
// claims (reusing a claim keeps the free slots for others), then
// placeholders; each vdev after mustInclude must bring an instance the
// choice does not use yet, as Allocate allows no two slots of one instance
// in one container request. A claimed vdev's instance is known; a
// placeholder gets one at Allocate, so placeholders are limited to the
// usable instances that the choice leaves. Among claimed vdevs, those on a
// NUMA node of a claimed mustInclude vdev's device come first; otherwise
// ids go in numeric order, whatever order available came in.
//
// The result may be shorter than size when no distinct instances are
// left: the kubelet fills the rest, and Allocate denies the request.
func (p *Pool) Prefer(available, mustInclude []string, size int) []string {
	c := newChoice(p)
	for _, v := range mustInclude {
		c.take(v)
	}
	c.numa = c.numaOfUsed()
	if len(c.ids) >= size {
		return c.ids
	}
	claimed, placeholders := c.candidates(available)
	c.sortByNUMA(claimed)
	for _, v := range claimed {
		if len(c.ids) >= size {
			break
		}
		if ref := c.mapped[v]; !c.used[ref.instance] && c.leavesRoom(ref.instance) {
			c.take(v)
		}
	}
	for _, v := range placeholders {
		if len(c.ids) >= size || c.spare() == 0 {
			break
		}
		c.take(v)
	}
	return c.ids
}

// choice is a preferred allocation being built.
type choice struct {
	p      *Pool
	mapped map[string]slotRef // this node's claimed vdevs
	// usable are the instances a placeholder can get a slot from.
	usable map[string]bool
	ids    []string
	chosen map[string]bool
	// used are the instances the claimed vdevs of the choice hold;
	// placeholders counts the unclaimed vdevs of the choice.
	used         map[string]bool
	placeholders int
	// numa holds the NUMA nodes of the claimed mustInclude vdevs' devices.
	numa map[int]bool
}

func newChoice(p *Pool) *choice {
	c := &choice{p: p, mapped: p.claimed(), usable: map[string]bool{}, chosen: map[string]bool{}, used: map[string]bool{}}
	for i := range p.Instances {
		if in := &p.Instances[i]; p.usable(in) {
			c.usable[in.Name] = true
		}
	}
	return c
}

// take adds v to the choice.
func (c *choice) take(v string) {
	if c.chosen[v] {
		return
	}
	c.chosen[v] = true
	c.ids = append(c.ids, v)
	ref, claimed := c.mapped[v]
	if !claimed {
		c.placeholders++
		return
	}
	c.used[ref.instance] = true
}

// numaOfUsed returns the NUMA nodes of the devices the choice uses.
func (c *choice) numaOfUsed() map[int]bool {
	out := map[int]bool{}
	for name := range c.used {
		if n, ok := c.p.NUMA[name]; ok {
			out[n] = true
		}
	}
	return out
}

// spare counts the usable instances left for one more placeholder: those
// no claimed vdev of the choice holds, less the placeholders chosen.
func (c *choice) spare() int {
	n := 0
	for name := range c.usable {
		if !c.used[name] {
			n++
		}
	}
	return max(n-c.placeholders, 0)
}

// leavesRoom reports whether the placeholders already chosen still get an
// instance each when a claimed vdev of instance in joins the choice.
func (c *choice) leavesRoom(in string) bool {
	return !c.usable[in] || c.spare() > 0
}

// candidates splits the vdevs of available not chosen yet into this
// node's claimed ones and placeholders, each in numeric order.
func (c *choice) candidates(available []string) (claimed, placeholders []string) {
	seen := map[string]bool{}
	for _, v := range available {
		if c.chosen[v] || seen[v] {
			continue
		}
		seen[v] = true
		if _, ok := c.mapped[v]; ok {
			claimed = append(claimed, v)
		} else {
			placeholders = append(placeholders, v)
		}
	}
	sortIDs(claimed)
	sortIDs(placeholders)
	return claimed, placeholders
}

// sortByNUMA moves the claimed vdevs whose device shares a NUMA node with
// the mustInclude ones to the front, keeping the order otherwise.
func (c *choice) sortByNUMA(claimed []string) {
	near := func(v string) bool {
		n, ok := c.p.NUMA[c.mapped[v].instance]
		return ok && c.numa[n]
	}
	sort.SliceStable(claimed, func(i, j int) bool { return near(claimed[i]) && !near(claimed[j]) })
}

// sortIDs sorts vdev ids by number, ids that are not numbers last and
// by text.
func sortIDs(ids []string) {
	sort.Slice(ids, func(i, j int) bool {
		a, errA := strconv.Atoi(ids[i])
		b, errB := strconv.Atoi(ids[j])
		switch {
		case errA == nil && errB == nil:
			return a < b
		case errA == nil || errB == nil:
			return errA == nil
		}
		return ids[i] < ids[j]
	})
}

// Package pool holds the pure allocation rules of the bridge, with no I/O:
// which ids the Instance-level and Configuration-level device plugins
// advertise, and how a Configuration-level Allocate maps virtual device ids
// to device slots. The rules are those of the Configuration-level resources
// proposal: a configuration advertises the virtual devices this node
// already claims plus one per instance with a free slot; per container
// request a claimed virtual device keeps its slot, a new one takes a free
// slot of the instance with the most free slots (ties to the name, or,
// between shared instances, to an order of each node's own, so that racing
// nodes spread out), and no two slots of one instance go to one container
// request. Prefer answers the kubelet's
// GetPreferredAllocation with a choice of vdevs that Allocate can grant.
package pool

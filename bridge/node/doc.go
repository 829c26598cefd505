// Package node is the bridge on one node: it turns what discovery finds
// into Instances in the store and device plugins for the kubelet, and
// performs their allocations: claim in the store first (the store is the
// truth), then ADD on the plugin with the slot as request-id and the
// device pinned; on any failure everything claimed by the call is
// released and everything added is deleted.
package node

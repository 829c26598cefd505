// Package node is the bridge's device-plugin front end on one node: it
// turns the pools a discovery hands it (Node.Publish; the caller runs
// discovery, and keeps the pools another front end serves) into
// Instances in the store and device plugins for the kubelet, and
// performs their allocations: claim in the store first (the store is the
// truth), then ADD on the plugin with the slot as request-id and the
// device pinned; on any failure everything claimed by the call is
// released and everything added is deleted.
package node

// Package departed clears the claims of nodes that have left the cluster.
//
// A node's bridge frees its own slots when their containers end (slot
// reclaim), but a node that is gone for good, its Node object deleted,
// has no bridge left to do so: its claims would hold the shared devices'
// slots forever, and its name would keep its Instances alive. The
// Janitor runs in every bridge of the Kubernetes store; one of them at a
// time, chosen by client-go leader election on a Lease, watches the
// Nodes and, when one is deleted, frees every slot it holds at either
// level and deletes its Presences (kube.Store.ForgetNode, which stops if
// the node comes back meanwhile: its Node registered again, or its
// Presence written again). When it starts leading it also sweeps: a node
// named in the Instances or Presences (one that saw no device included)
// that has no Node object left while no leader was watching. And it
// deletes, every PruneEvery, the Instances no node has seen for
// UnseenGrace and nobody uses (kube.Store.PruneUnseen, which marks each
// and looks at the Presences again before it deletes, so that a node
// seeing it again meanwhile keeps it). The leader's work has stopped when
// its leadership ends, before another's starts.
//
// The leader opens a store of every pool (Config.OpenStore) while it
// leads: it alone watches every Instance and Presence, where each node's
// bridge watches the pools it serves. Other work that must be done by
// one bridge for the cluster, from that store, is given to the leader as
// Config.WhileLeading (the bridge's publishing of shared devices through
// DRA), so that this package knows nothing of it.
//
// Only the absence of a Node object counts as departure, checked with the
// API server before clearing and again before each of its writes: a node whose bridge merely restarts,
// or whose kubelet is briefly down, keeps its Node and so its claims. A
// bridge whose own Node object does not exist (its --node-name names no
// Node: a test, or a misconfiguration) does not take part, since to it
// every node, itself included, would look departed.
//
// The leader needs, in the bridge's namespace, leases get, create and
// update; nodes get, list and watch; and what the Instance store needs
// (instances and presences: get, list, watch, create, update, delete).
package departed

// Package departed is the elected bridge's job (an elected.Job) of
// clearing the claims of nodes that have left the cluster, and of
// deleting the Instances no node sees.
//
// A node's bridge frees its own slots when their containers end (slot
// reclaim), but a node that is gone for good, its Node object deleted,
// has no bridge left to do so: its claims would hold the shared devices'
// slots forever, and its name would keep its Instances alive. The
// Janitor, run by the elected bridge (bridge/elected) on its store of
// every pool, watches the Nodes and, when one is deleted, frees every
// slot it holds at either level and deletes its Presences
// (kube.Store.ForgetNode, which stops if the node comes back meanwhile:
// its Node registered again, or its Presence written again). When it
// starts, at each leadership, it also sweeps: a node named in the
// Instances or Presences (one that saw no device included) that has no
// Node object left while no leader was watching. And it deletes, every
// PruneEvery, the Instances no node has seen for UnseenGrace and nobody
// uses (kube.Store.PruneUnseen, which marks each and looks at the
// Presences again before it deletes, so that a node seeing it again
// meanwhile keeps it). Its Run returns once its pruning has stopped.
//
// Only the absence of a Node object counts as departure, checked with the
// API server before clearing and again before each of its writes: a node
// whose bridge merely restarts, or whose kubelet is briefly down, keeps
// its Node and so its claims.
//
// It needs nodes get, list and watch; and what the Instance store needs
// (instances and presences: get, list, watch, create, update, delete).
package departed

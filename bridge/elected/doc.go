// Package elected runs the elected bridge: the one bridge of the cluster
// that does the work which must be done once for the cluster rather than
// on every node. Its jobs are Jobs given to it by their packages:
// clearing departed nodes' claims and pruning the Instances no node sees
// (elected/departed), publishing the shared devices of the DRA pools
// (drafront), and making the Brokers' workloads (broker).
//
// It runs with the Kubernetes Instance store only. Every bridge is a
// Candidate: client-go leader election on a Lease in the Instances'
// namespace (DefaultLease, the bridge's --leader-election-lease), with
// the node name as identity, chooses one. A bridge whose own Node object
// does not exist (its --node-name names no Node: a test, or a
// misconfiguration) does not run for election, since to it every node,
// itself included, would look departed.
//
// While it leads, the elected bridge opens the store of every pool once
// (Config.OpenStore): it alone watches every Instance and Presence, where
// each node's bridge watches the pools it serves. It runs every job on
// that store side by side, each in a goroutine of its own. A job that
// stops with an error is logged and waits for the next leadership; the
// others go on.
//
// When leadership ends, every job's context ends, and the job has
// returned before leadership is given up. A bridge that stops (its
// context ends) keeps renewing the Lease until its jobs have returned,
// and only then releases it, so that another takes over at once but
// never while these jobs still write. A leader whose renewals fail (the
// API server unreachable) ends its jobs' context after RenewDeadline,
// while the other bridges wait LeaseDuration from its last renewal before
// they take the Lease: the difference, 5 s by default, is what its jobs
// have to return in, as for every client-go leader. A new leader, here
// or on another node, starts every job afresh from the API server's
// objects: nothing of a job's state is handed from one leadership to the
// next.
//
// A Candidate needs, in the namespace, leases get, create and update
// (the RBAC names the Lease); nodes get; and what the store and the jobs
// need.
package elected

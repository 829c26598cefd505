// Package electtest runs elected bridges (bridge/elected) for tests
// against an apitest API server, each as a user with exactly the rights
// the bridge is granted on the Lease and the Nodes (and the Instances and
// Presences its jobs use): if leader election or a job needed another
// verb, the tests would fail.
//
// A Cluster is one test's namespace, in which that user may hold the
// Lease, with Node objects; Start runs a Candidate as a node's bridge
// would, with test timing, until the test ends or it is stopped, and
// shows its log when the test fails.
package electtest

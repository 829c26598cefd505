// Package kube is the instance.Store kept in the Kubernetes API: one
// Instance custom resource per device (bridge/deploy/crd), shared by the
// bridges of every node.
//
// Concurrency is optimistic: every change is a read-modify-write of one
// object guarded by its resourceVersion, so two nodes racing for one slot
// can never both win and no write loses another node's keys; the loser
// re-reads and applies the instance package's rules again, a bounded
// number of times. Reads come from informers, which also drive the
// change feed, so an allocation costs one API write when nobody races.
//
// Every Instance carries its pool in the label LabelPool. A node's Store
// (ServedPools) runs an informer per pool its drop-ins report, selected
// by that label, so that what a bridge holds and hears grows with what it
// serves, not with the cluster; only the one bridge that clears departed
// nodes follows every pool (AllPools). The informers keep no
// managedFields.
//
// Who sees a device is a Presence per node and pool, written by that
// node's store; an Instance no Presence lists and no claim holds is
// deleted by the elected bridge only (PruneUnseen). The two are separate
// objects, so that a node's "I see X" wins against "nobody sees X" by
// order: a node writes its Presence before any Instance and reads the
// Instances new to it afresh, where the elected bridge marks X
// (AnnotationUnseen), looks at the Presences again, and deletes X guarded
// by the mark's resourceVersion. A node's store also keeps its own
// Presences as its last Observe said, whatever else writes them, and
// creates again an Instance they list that is deleted (own.go).
// bridge/SCALING.md says why each step is there.
package kube

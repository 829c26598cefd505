// Package instance is the bridge's record of a device across the cluster:
// an Instance per device with `capacity` usage slots, what each slot is
// used by, and the Store interface behind which the records live (a local
// file on a single node, Instance objects in the Kubernetes API in a
// cluster). The Store is the truth: every claim is made there first, and
// every list the kubelet sees is derived from it.
package instance

// Package dradevices is the device side of the bridge's DRA front end:
// what the exec plugins' INFO inventory looks like as ResourceSlices,
// one DRA pool per pool of the bridge on each node.
//
// It knows nothing of the kubelet's gRPC or of plugin registration:
// package bridge/dra publishes what Resources returns.
package dradevices

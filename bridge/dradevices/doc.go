// Package dradevices is the device side of the bridge's DRA front end:
// what the exec plugins' INFO inventory looks like as ResourceSlices (a
// node's own devices in its pools, an unhealthy one tainted
// <driver>/unhealthy, NoSchedule unless its drop-in's Settings ask for
// NoExecute; the shared devices the Instance store records in one pool
// for the cluster, which the elected bridge publishes), what the kubelet
// is told of their health (Preparer.Health: why a device is unhealthy,
// and the devices of prepared claims that discovery no longer lists),
// and how a ResourceClaim the scheduler allocated from them is prepared
// on this node (ADD pinned to the chosen devices, a CDI spec per claim)
// and unprepared (DEL, the spec removed), with what was prepared kept in
// a checkpoint file because the kubelet names a claim only by its UID
// when it asks to unprepare it. Observed tells an observer (the bridge's
// metrics) of every Prepare and Unprepare, by pool, with how long it
// took and why it failed.
//
// The checkpoint is a cache. What the plugins hold is their LIST (a
// claim's request-ids are <claim UID>-<n>), which claims are prepared
// here the API server's allocations and the kubelet's containers say:
// every Prepare repeats its ADDs, an Unprepare of a claim not recorded
// DELs what LIST has of it, and at start Rebuild prepares again what the
// API server has allocated here and releases only what neither it nor a
// container holds. A checkpoint that cannot be read, or that a previous
// boot wrote, is moved aside (OpenCheckpoint).
//
// It knows nothing of the kubelet's gRPC or of plugin registration: the
// package bridge/dra calls it through dra.Devices.
package dradevices

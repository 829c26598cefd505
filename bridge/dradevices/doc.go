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
// here the kubelet says (its pods' claims, which it will unprepare) and
// the API server's allocations of them: every Prepare repeats its ADDs,
// and undoes only the ADDs it made itself when one fails; an Unprepare of
// a claim not recorded DELs what LIST has of it; at start Rebuild
// prepares again the claims in use here (reserved for a pod the kubelet
// runs; each pod and claim read from the API server by its name, never a
// list) and unprepares the recorded claims the API server no longer has
// allocated. Every reclaim period Sweep releases what no pod of the
// kubelet's has used for the grace: a recorded claim, an ADD of no
// record, a device plugins' slot left in a pool moved to DRA. A
// checkpoint that cannot be read, or that a previous boot wrote, is moved
// aside (OpenCheckpoint).
//
// With a pod UID (Preparer.PluginDir) the two bridges of a rolling
// update share the checkpoint file. The kubelet-plugin library holds a
// lock file of the plugin directory around each Prepare and Unprepare
// (dra.CallLock), under which each call reads the checkpoint anew; what
// runs outside those calls and releases allocations or writes the file,
// Rebuild (which also reads the kubelet's claims under it) and Sweep,
// takes the same lock first. Read anew, a file that cannot be
// read is moved aside and the records in memory are written again; one
// that is gone leaves them.
//
// It knows nothing of the kubelet's gRPC or of plugin registration: the
// package bridge/dra calls it through dra.Devices.
package dradevices

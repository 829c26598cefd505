// Package drafront is the bridge's DRA front end at run time: the pools
// discovery hands it (SetPools) are prepared for the kubelet's claims by
// a dradevices.Preparer behind a kubelet plugin (bridge/dra), the node's
// own devices are published in its ResourceSlices, and its shared devices
// (network cameras) are recorded in the Instance store, from which the
// elected bridge (bridge/elected) publishes them once for the cluster
// (SharedJob).
//
// Its checkpoint is a cache. Start moves aside one that cannot be read or
// that a previous boot wrote (a Warning Event of the Node says so); once
// the first discovery has set the pools, the prepared claims are rebuilt
// from the pods the kubelet's PodResources lists and the claims they
// name, each read from the API server by its name (nodeClaims), and the
// plugins' LIST (dradevices.Preparer.Rebuild), and only then is the
// driver registered with the kubelet and the slices published. Every
// reclaim period what the DRA pools' plugins hold and no pod of the
// kubelet's has used for the grace is released
// (dradevices.Preparer.Sweep): a prepared claim the kubelet will never
// unprepare, an ADD whose record was lost, a device plugins' allocation
// left in a pool moved to DRA under running pods; the devices of the last
// two are left out of the slices until then.
//
// With a pod UID (Config.PodUID, the chart's maxSurge update with
// dra.pools) the driver registers under sockets of its pod, beside the
// old pod's, and shares the checkpoint with it: Start opens it, setting
// it aside if need be, under the kubelet-plugin library's lock of the
// calls (dra.LockCalls), and so does every later read
// (bridge/dradevices). During the overlap only the bridge that holds the
// node's lock (cdi-bridge's --node-lock, which the chart sets: the old
// pod) writes the node's slices; the new one's slice controller
// (Config.Slices, started with dra.AfterLock) waits for the lock, which
// the old one lets go once its own controller has stopped, and then
// adopts the slices and writes its own view over them. Its kubelet
// plugin registers and prepares claims meanwhile, so that the kubelet
// moves to it. The kubelet watches both health streams; when the old pod
// stops, the kubelet forgets the driver's health, both pods', and knows
// it again from the new pod's next report (dra.HealthResend).
//
// Which pools it serves is decided by its caller: Split divides a
// discovery between the device plugins (bridge/node) and this front end,
// a drop-in never between the two. While another bridge holds the node's
// lock, cdi-bridge splits by that holder's DRA pools (its record), not
// by its own: a pool is served by one front end at a time.
package drafront

// Package drafront is the bridge's DRA front end at run time: the pools
// discovery hands it (SetPools) are prepared for the kubelet's claims by
// a dradevices.Preparer behind a kubelet plugin (bridge/dra), the node's
// own devices are published in its ResourceSlices, and its shared devices
// (network cameras) are recorded in the Instance store, from which the
// bridge elected on the departed-node Lease publishes them once for the
// cluster (LeadShared).
//
// Which pools it serves is decided by its caller: Split divides a
// discovery between the device plugins (bridge/node) and this front end,
// a drop-in never between the two.
package drafront

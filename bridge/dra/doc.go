// Package dra is the bridge's DRA front end toward the kubelet: it starts
// a kubelet plugin (k8s.io/dynamic-resource-allocation/kubeletplugin)
// that registers with the kubelet, publishes ResourceSlices (NodeSlices,
// whose controller its caller may start before the driver; on a node
// with none of the driver's slices the first are written ahead of the
// controller, which adopts them; with AfterLock, only once the bridge
// holds the node's lock, so that of the two bridges of a rolling update
// only one writes the node's slices), answers
// NodePrepareResources and NodeUnprepareResources by calling Devices, and
// serves the kubelet's device health stream (DRAResourceHealth, v1 and
// v1alpha1) from the list the device side last reported
// (Driver.ReportHealth), sent again every HealthResend so that the
// kubelet never takes a device's health for Unknown while the bridge
// runs.
//
// What a device is and how a claim is prepared is not here but behind
// the Devices interface (bridge/dradevices implements it over the exec
// plugins); Publisher is the other seam, through which the device side
// publishes slices and health. Package dratest has fakes of both.
package dra

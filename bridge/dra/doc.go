// Package dra is the bridge's DRA front end toward the kubelet: it starts
// a kubelet plugin (k8s.io/dynamic-resource-allocation/kubeletplugin)
// that registers with the kubelet, publishes ResourceSlices and answers
// NodePrepareResources and NodeUnprepareResources by calling Devices.
//
// What a device is and how a claim is prepared is not here but behind
// the Devices interface (bridge/dradevices implements it over the exec
// plugins); Publisher is the other seam, through which the device side
// publishes. Package dratest has fakes of both.
package dra

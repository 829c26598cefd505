// Package kubelet drives the real cdi-bridge binary through the kubelet's
// own device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager):
// registration, allocation and restarts of either side, over real unix
// sockets.
package kubelet

// Package deviceplugin runs one kubelet device plugin (API v1beta1) for
// one resource and knows nothing of CDI: a Handler supplies the devices,
// their changes and the answers to Allocate. The package owns the
// lifecycle: serve on a socket with a name unique to each registration
// (so a rolling update never removes a newer bridge's socket), register
// only once the server answers (the kubelet dials back inside Register),
// register again when kubelet.sock is re-created or our socket vanishes
// (a kubelet restart removes every socket in the directory), send an
// empty device list when a resource is withdrawn, and on shutdown end the
// streams and remove the socket.
package deviceplugin

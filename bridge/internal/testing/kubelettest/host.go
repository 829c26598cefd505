package kubelettest

import (
	"os"
	"path/filepath"
	"testing"
)

// Host is one node's kubelet side for a test: a temporary device-plugin
// directory with the Registration service on its kubelet.sock, and a
// PodResources server on a socket beside it. Everything stops and goes
// when the test ends.
type Host struct {
	// Dir is the device-plugin directory (a bridge's --device-plugin-dir).
	Dir string
	// PodResourcesSocket is the PodResources server's socket (a bridge's
	// --pod-resources-socket).
	PodResourcesSocket string
	Kubelet            *Kubelet
	Pods               *PodResources
}

// NewHost starts a Host. Its directory is made under os.TempDir, not
// t.TempDir: unix socket paths are limited to about a hundred bytes.
func NewHost(tb testing.TB) *Host {
	tb.Helper()
	dir, err := os.MkdirTemp("", "kl")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	h := &Host{Dir: dir, PodResourcesSocket: filepath.Join(dir, "pod-resources.sock")}
	if h.Kubelet, err = Start(dir); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Kubelet.Stop)
	if h.Pods, err = ServePodResources(h.PodResourcesSocket); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Pods.Stop)
	return h
}

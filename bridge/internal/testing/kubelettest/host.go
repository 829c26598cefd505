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

// SocketDir is a new directory for unix sockets, removed when the test
// ends. It is made under os.TempDir, not t.TempDir, whose paths can pass
// the hundred or so bytes a socket's path may have (sun_path).
func SocketDir(tb testing.TB, prefix string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// NewHost starts a Host, in a SocketDir.
func NewHost(tb testing.TB) *Host {
	tb.Helper()
	dir := SocketDir(tb, "kl")
	var err error
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

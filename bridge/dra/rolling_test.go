package dra_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dra/dratest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
)

// startPod starts a Driver as the bridge of pod uid does, in the plugin
// and registry directories under dir, and returns a kubelet-side client
// of its DRA socket.
func startPod(t *testing.T, dir string, uid types.UID, devices dra.Devices, claims ...*resourceapi.ResourceClaim) drapbv1.DRAPluginClient {
	t.Helper()
	var objs []runtime.Object
	for _, c := range claims {
		objs = append(objs, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := dra.Start(ctx, dra.Config{DriverName: "cdi.local", NodeName: "n", Client: fake.NewClientset(objs...), Devices: devices,
		PluginDir: filepath.Join(dir, "plugin"), RegistrarDir: filepath.Join(dir, "registry"), PodUID: uid})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); d.Stop() })
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "plugin", "dra-"+string(uid)+".sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return drapbv1.NewDRAPluginClient(conn)
}

// With a pod UID, two bridges of a DaemonSet update serve the driver side
// by side: each registers under its pod's socket names, and their
// Prepare and Unprepare calls wait for CallLock, the file lock the
// library takes around them, which the rebuild of the prepared claims
// takes too.
func TestRollingUpdate(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dra")
	if err := os.Mkdir(filepath.Join(dir, "registry"), 0o700); err != nil {
		t.Fatal(err)
	}
	oldPod, newPod := &dratest.Devices{Vendor: "cdi.local"}, &dratest.Devices{Vendor: "cdi.local"}
	claim := allocatedClaim("u1")
	startPod(t, dir, "pod-1", oldPod, claim)
	kubelet := startPod(t, dir, "pod-2", newPod, claim)
	for _, sock := range []string{"registry/cdi.local-pod-1-reg.sock", "registry/cdi.local-pod-2-reg.sock",
		"plugin/dra-pod-1.sock", "plugin/dra-pod-2.sock"} {
		if _, err := os.Stat(filepath.Join(dir, sock)); err != nil {
			t.Errorf("socket: %v", err)
		}
	}

	unlock, err := dra.LockCalls(context.Background(), filepath.Join(dir, "plugin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := kubelet.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{
			Claims: []*drapbv1.Claim{{Namespace: "ns", Name: "c-u1", Uid: "u1"}},
		})
		done <- err
	}()
	// The call reaches the library, which waits for the lock: the claim
	// is not prepared while the lock is held (the other bridge's call, or
	// its rebuild of the prepared claims, would be running).
	time.Sleep(500 * time.Millisecond)
	if prepared, _ := newPod.Calls(); len(prepared) != 0 {
		t.Errorf("prepared %v while another bridge held %s", prepared, dra.CallLock(filepath.Join(dir, "plugin")))
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if prepared, _ := newPod.Calls(); len(prepared) != 1 {
		t.Errorf("the new pod's bridge prepared %v once the lock was free, want u1", prepared)
	}
	if prepared, _ := oldPod.Calls(); len(prepared) != 0 {
		t.Errorf("the old pod's bridge prepared %v, its socket was not called", prepared)
	}
}

// A wait for the lock of the calls ends with its context, and the lock,
// when it comes, is let go: the next caller has it.
func TestLockCallsEndsWithItsContext(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plugin") // made by LockCalls
	unlock, err := dra.LockCalls(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := dra.LockCalls(ctx, dir); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockCalls while the lock is held, until its context ends: %v, want the deadline", err)
	}
	unlock()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	again, err := dra.LockCalls(ctx, dir)
	if err != nil {
		t.Fatalf("LockCalls after the one given up: %v", err)
	}
	again()
}

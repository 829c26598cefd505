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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dra/dratest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
)

func allocatedClaim(uid types.UID) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + string(uid), UID: uid},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "tty", Driver: "cdi.local", Pool: "n/tty-generic", Device: "tty13"},
			}},
		}},
	}
}

// startDriver starts a Driver over devices, and returns a kubelet-side
// client of its DRA socket.
func startDriver(t *testing.T, devices dra.Devices, claims ...*resourceapi.ResourceClaim) drapbv1.DRAPluginClient {
	t.Helper()
	_, dir := startDriverIn(t, devices, claims...)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "plugin", "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return drapbv1.NewDRAPluginClient(conn)
}

// startDriverIn starts a Driver over devices, with its sockets under the
// directory it returns: plugin/dra.sock and registry/cdi.local-reg.sock.
func startDriverIn(t *testing.T, devices dra.Devices, claims ...*resourceapi.ResourceClaim) (*dra.Driver, string) {
	t.Helper()
	dir := kubelettest.SocketDir(t, "dra")
	var objs []runtime.Object
	for _, c := range claims {
		objs = append(objs, c)
	}
	client := fake.NewClientset(objs...)
	if err := os.Mkdir(filepath.Join(dir, "registry"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := dra.Start(ctx, dra.Config{DriverName: "cdi.local", NodeName: "n", Client: client, Devices: devices,
		PluginDir: filepath.Join(dir, "plugin"), RegistrarDir: filepath.Join(dir, "registry")})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); d.Stop() })
	for _, sock := range []string{filepath.Join(dir, "plugin", "dra.sock"), filepath.Join(dir, "registry", "cdi.local-reg.sock")} {
		if _, err := os.Stat(sock); err != nil {
			t.Fatalf("socket: %v", err)
		}
	}
	return d, dir
}

// The driver is registered once the kubelet says so over the
// registration socket, and not when it says registration failed.
func TestRegistered(t *testing.T) {
	d, dir := startDriverIn(t, &dratest.Devices{})
	if err := d.Registered(); !errors.Is(err, dra.ErrNotRegistered) {
		t.Fatalf("before the kubelet answered: %v, want ErrNotRegistered", err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "registry", "cdi.local-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kubelet := registerapi.NewRegistrationClient(conn)
	ctx := t.Context()
	if _, err := kubelet.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kubelet.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if err := d.Registered(); err != nil {
		t.Errorf("after the kubelet registered it: %v", err)
	}
	// The library answers a failed registration with an error of its own.
	_, _ = kubelet.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "version not supported"})
	if err := d.Registered(); !errors.Is(err, dra.ErrNotRegistered) {
		t.Errorf("after the kubelet refused it: %v, want ErrNotRegistered", err)
	}
}

func TestPrepareAndUnprepareOverTheSocket(t *testing.T) {
	devices := &dratest.Devices{Vendor: "cdi.local"}
	kubelet := startDriver(t, devices, allocatedClaim("u1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prep, err := kubelet.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{
		Claims: []*drapbv1.Claim{{Namespace: "ns", Name: "c-u1", Uid: "u1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := prep.Claims["u1"]
	if got == nil || got.Error != "" || len(got.Devices) != 1 {
		t.Fatalf("prepare response %v", prep)
	}
	if d := got.Devices[0]; d.PoolName != "n/tty-generic" || d.DeviceName != "tty13" ||
		len(d.CdiDeviceIds) != 1 || d.CdiDeviceIds[0] != "cdi.local/claim=u1" || len(d.RequestNames) != 1 || d.RequestNames[0] != "tty" {
		t.Errorf("device %v", d)
	}
	unprep, err := kubelet.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{
		Claims: []*drapbv1.Claim{{Namespace: "ns", Name: "c-u1", Uid: "u1"}},
	})
	if err != nil || unprep.Claims["u1"] == nil || unprep.Claims["u1"].Error != "" {
		t.Fatalf("unprepare: %v, %v", unprep, err)
	}
	prepared, unprepared := devices.Calls()
	if len(prepared) != 1 || len(unprepared) != 1 || unprepared[0] != "u1" {
		t.Errorf("calls: prepared %v, unprepared %v", prepared, unprepared)
	}
}

func TestPrepareFailureIsTheClaims(t *testing.T) {
	devices := &dratest.Devices{Err: errors.New("no such device")}
	kubelet := startDriver(t, devices, allocatedClaim("u1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prep, err := kubelet.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{
		Claims: []*drapbv1.Claim{{Namespace: "ns", Name: "c-u1", Uid: "u1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := prep.Claims["u1"]; got == nil || got.Error == "" {
		t.Errorf("prepare response %v, want the claim's error", prep)
	}
}

func TestStartNeedsItsConfig(t *testing.T) {
	_, err := dra.Start(context.Background(), dra.Config{DriverName: "cdi.local"})
	if !errors.Is(err, dra.ErrConfig) {
		t.Errorf("Start = %v, want ErrConfig", err)
	}
}

package dra_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dra/dratest"
)

// The kubelet's health stream, over the driver's socket in both the
// versions kubelets speak (v1 from 1.37, v1alpha1 before): the devices'
// health as the driver last reported it, each with HealthTimeout, and
// the new list as soon as one device changes. The registration
// advertises both.
func TestHealthOverTheSocket(t *testing.T) {
	d, dir := startDriverIn(t, &dratest.Devices{})
	conn := dial(t, filepath.Join(dir, "plugin", "dra.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, err := registerapi.NewRegistrationClient(dial(t, filepath.Join(dir, "registry", "cdi.local-reg.sock"))).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService} {
		if !slices.Contains(info.SupportedVersions, svc) {
			t.Errorf("registration advertises %v, not %s", info.SupportedVersions, svc)
		}
	}

	d.ReportHealth([]dra.DeviceHealth{{Pool: "n/tty-generic", Name: "tty13", Health: dra.Healthy}})
	v1, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	alpha, err := drahealthv1alpha1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1alpha1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := v1.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Devices; len(got) != 1 || got[0].Device.DeviceName != "tty13" || got[0].Health != drahealthv1.HealthStatus_HEALTHY ||
		got[0].HealthCheckTimeoutSeconds != int64(dra.HealthTimeout/time.Second) {
		t.Errorf("v1's first report %v, want tty13 healthy, with the timeout", got)
	}
	if a, err := alpha.Recv(); err != nil || len(a.Devices) != 1 || a.Devices[0].Health != drahealthv1alpha1.HealthStatus_HEALTHY {
		t.Errorf("v1alpha1's first report %v, %v", a, err)
	}

	d.ReportHealth([]dra.DeviceHealth{{Pool: "n/tty-generic", Name: "tty13", Health: dra.Unhealthy, Message: "vanished"}})
	// A resend of the first list may be under way as it changes.
	var got []*drahealthv1.DeviceHealth
	for range 2 {
		next, err := v1.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got = next.Devices; len(got) == 1 && got[0].Health != drahealthv1.HealthStatus_HEALTHY {
			break
		}
	}
	if len(got) != 1 || got[0].Health != drahealthv1.HealthStatus_UNHEALTHY || got[0].Message != "vanished" {
		t.Errorf("after the device vanished: %v, want it unhealthy, saying so", got)
	}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

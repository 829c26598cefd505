package kubelettest

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources is the kubelet's PodResources List over a unix socket,
// answering with the device ids a test says running containers hold.
type PodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu     sync.Mutex
	held   map[string][]string // resource -> device ids
	claims []HeldClaim
	g      *grpc.Server
}

// HeldClaim is a DRA claim a container holds, as the kubelet reports it:
// its driver and the CDI names its devices gave the container.
type HeldClaim struct {
	Namespace, Name, Driver string
	CDIDevices              []string
}

// ServePodResources serves the API on socket until Stop.
func ServePodResources(socket string) (*PodResources, error) {
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	p := &PodResources{g: grpc.NewServer()}
	podresourcesapi.RegisterPodResourcesListerServer(p.g, p)
	go func() { _ = p.g.Serve(lis) }()
	return p, nil
}

// Set replaces what the containers hold: resource name to device ids.
func (p *PodResources) Set(held map[string][]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = held
}

// SetClaims replaces the DRA claims the containers hold.
func (p *PodResources) SetClaims(claims ...HeldClaim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claims = claims
}

// List answers with one pod whose one container holds everything Set
// and SetClaims.
func (p *PodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &podresourcesapi.ContainerResources{Name: "app"}
	for res, ids := range p.held {
		c.Devices = append(c.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: ids})
	}
	for _, claim := range p.claims {
		r := &podresourcesapi.ClaimResource{DriverName: claim.Driver}
		for _, name := range claim.CDIDevices {
			r.CdiDevices = append(r.CdiDevices, &podresourcesapi.CDIDevice{Name: name})
		}
		c.DynamicResources = append(c.DynamicResources, &podresourcesapi.DynamicResource{
			ClaimName: claim.Name, ClaimNamespace: claim.Namespace, ClaimResources: []*podresourcesapi.ClaimResource{r}})
	}
	pod := &podresourcesapi.PodResources{Name: "app", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{c}}
	return &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{pod}}, nil
}

// Stop ends the server.
func (p *PodResources) Stop() { p.g.Stop() }

// StartPodResources serves the API on a socket of the test's, until the
// test ends, and returns it with a client of it.
func StartPodResources(tb testing.TB) (*PodResources, podresourcesapi.PodResourcesListerClient) {
	tb.Helper()
	sock := filepath.Join(SocketDir(tb, "pr"), "kubelet.sock")
	p, err := ServePodResources(sock)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return p, podresourcesapi.NewPodResourcesListerClient(conn)
}

package reclaim

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Held is, per resource name, the device ids that containers hold.
type Held map[string]map[string]bool

// Lister is the part of the PodResources API a Reclaimer uses.
type Lister interface {
	List(ctx context.Context, req *podresourcesapi.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error)
}

var _ Lister = (podresourcesapi.PodResourcesListerClient)(nil)

// Dial connects to the kubelet's PodResources socket. The connection is
// made lazily, so a kubelet that is not up yet is an error of the first
// List, not of Dial.
func Dial(socket string) (*grpc.ClientConn, podresourcesapi.PodResourcesListerClient, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("pod-resources socket %s: %w", socket, err)
	}
	return conn, podresourcesapi.NewPodResourcesListerClient(conn), nil
}

// ListHeld asks the kubelet which device ids of the resources under
// domain ("<domain>/...") its containers hold.
func ListHeld(ctx context.Context, l Lister, domain string) (Held, error) {
	resp, err := l.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod resources: %w", err)
	}
	held := Held{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			for _, d := range c.GetDevices() {
				if !strings.HasPrefix(d.GetResourceName(), domain+"/") {
					continue
				}
				ids := held[d.GetResourceName()]
				if ids == nil {
					ids = map[string]bool{}
					held[d.GetResourceName()] = ids
				}
				for _, id := range d.GetDeviceIds() {
					ids[id] = true
				}
			}
		}
	}
	return held, nil
}

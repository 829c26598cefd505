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

// Pods is what the kubelet's containers hold of one domain's resources:
// the device plugins' devices, and the DRA driver's claims.
type Pods struct {
	// Devices are, per resource <domain>/..., the device ids containers
	// hold.
	Devices Held
	// Claims are the driver's claims containers hold, as
	// <namespace>/<name>.
	Claims map[string]bool
	// CDIDevices are the qualified CDI names that the driver's claims
	// give the containers.
	CDIDevices map[string]bool
	// Running is every pod the kubelet lists (its pods not done), as
	// <namespace>/<name>: a pod's claims that only an init container
	// or no container uses are not among Claims.
	Running map[string]bool
	// Holders are, per resource <domain>/... and device id, the pod
	// (<namespace>/<name>) whose container holds it.
	Holders map[string]map[string]string
}

// ListHeld asks the kubelet which device ids of the resources under
// domain ("<domain>/...") its containers hold.
func ListHeld(ctx context.Context, l Lister, domain string) (Held, error) {
	pods, err := ListPods(ctx, l, domain)
	if err != nil {
		return nil, err
	}
	return pods.Devices, nil
}

// ListPods asks the kubelet what its containers hold of the device
// plugins' resources under domain and of the claims of the DRA driver of
// that name.
func ListPods(ctx context.Context, l Lister, domain string) (*Pods, error) {
	resp, err := l.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod resources: %w", err)
	}
	pods := &Pods{Devices: Held{}, Claims: map[string]bool{}, CDIDevices: map[string]bool{}, Running: map[string]bool{},
		Holders: map[string]map[string]string{}}
	for _, pod := range resp.GetPodResources() {
		key := pod.GetNamespace() + "/" + pod.GetName()
		pods.Running[key] = true
		for _, c := range pod.GetContainers() {
			pods.addDevices(key, c.GetDevices(), domain)
			pods.addClaims(c.GetDynamicResources(), domain)
		}
	}
	return pods, nil
}

func (p *Pods) addDevices(pod string, devices []*podresourcesapi.ContainerDevices, domain string) {
	for _, d := range devices {
		res := d.GetResourceName()
		if !strings.HasPrefix(res, domain+"/") {
			continue
		}
		if p.Devices[res] == nil {
			p.Devices[res] = map[string]bool{}
			p.Holders[res] = map[string]string{}
		}
		for _, id := range d.GetDeviceIds() {
			p.Devices[res][id] = true
			p.Holders[res][id] = pod
		}
	}
}

func (p *Pods) addClaims(claims []*podresourcesapi.DynamicResource, driver string) {
	for _, claim := range claims {
		for _, r := range claim.GetClaimResources() {
			if r.GetDriverName() != driver {
				continue
			}
			p.Claims[claim.GetClaimNamespace()+"/"+claim.GetClaimName()] = true
			for _, d := range r.GetCdiDevices() {
				p.CDIDevices[d.GetName()] = true
			}
		}
	}
}

package deviceplugin

import (
	"context"
	"slices"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device is one device id as the kubelet sees it.
type Device struct {
	ID        string
	Healthy   bool
	NUMANodes []int
}

// Handler is the device logic behind one resource.
type Handler interface {
	// Devices returns the current list; it is called for every send.
	Devices() []Device
	// Changes returns a channel that receives when Devices may have
	// changed (coalesced), and a function to stop receiving.
	Changes() (<-chan struct{}, func())
	Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error)
	// PreferredAllocation may return nil, nil for "no preference".
	PreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error)
}

// server is the gRPC DevicePlugin service of one registration.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	handler   Handler
	preferred bool
	sent      func() // Spec.Sent; nil for none
	// streams counts open ListAndWatch streams and closed says when the
	// last one ended; done ends them all, with an empty list if withdraw
	// (set before done is closed).
	mu       sync.Mutex
	streams  int
	closed   time.Time
	done     chan struct{}
	withdraw bool
}

func newServer(spec Spec) *server {
	return &server{handler: spec.Handler, preferred: spec.Preferred, sent: spec.Sent, done: make(chan struct{})}
}

// told tells Spec.Sent that a list went out.
func (s *server) told() {
	if s.sent != nil {
		s.sent()
	}
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: s.preferred}, nil
}

// ListAndWatch sends the list at once and after every change, until the
// kubelet goes away or the plugin stops; a plugin withdrawn (its resource
// no longer served) then sends an empty list, so that the kubelet stops
// offering the devices at once.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	changes, cancel := s.handler.Changes()
	defer cancel()
	s.mu.Lock()
	s.streams++
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.streams--; s.closed = time.Now(); s.mu.Unlock() }()
	var last []Device
	for first := true; ; first = false {
		// A change signal need not change this resource's list (a claim
		// elsewhere in the pool, the store announcing a write twice): the
		// kubelet is sent only lists that differ from the last.
		if devs := s.handler.Devices(); first || !Equal(devs, last) {
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: toAPI(devs)}); err != nil {
				return err
			}
			s.told()
			last = devs
		}
		select {
		case <-changes:
		case <-stream.Context().Done():
			return nil
		case <-s.done:
			if !s.withdraw {
				return nil
			}
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: []*pluginapi.Device{}}); err != nil {
				return err
			}
			s.told()
			return nil
		}
	}
}

func (s *server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return s.handler.Allocate(ctx, req)
}

func (s *server) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp, err := s.handler.PreferredAllocation(ctx, req)
	if resp == nil && err == nil {
		resp = &pluginapi.PreferredAllocationResponse{}
	}
	return resp, err
}

func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// Equal reports whether two lists are the same, in the same order.
func Equal(a, b []Device) bool {
	return slices.EqualFunc(a, b, func(x, y Device) bool {
		return x.ID == y.ID && x.Healthy == y.Healthy && slices.Equal(x.NUMANodes, y.NUMANodes)
	})
}

func toAPI(devs []Device) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(devs))
	for i, d := range devs {
		health := pluginapi.Unhealthy
		if d.Healthy {
			health = pluginapi.Healthy
		}
		out[i] = &pluginapi.Device{ID: d.ID, Health: health}
		if len(d.NUMANodes) > 0 {
			topo := &pluginapi.TopologyInfo{}
			for _, n := range d.NUMANodes {
				topo.Nodes = append(topo.Nodes, &pluginapi.NUMANode{ID: int64(n)})
			}
			out[i].Topology = topo
		}
	}
	return out
}

// orphaned reports whether the kubelet had a stream, has none now, and has
// had none for longer than grace.
func (s *server) orphaned(grace time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams == 0 && !s.closed.IsZero() && time.Since(s.closed) > grace
}

// Package kubelettest is a kubelet's device-manager side for tests, over
// real unix sockets: it serves the Registration service on kubelet.sock,
// dials each registering plugin back, keeps a ListAndWatch stream open to
// it and records every list with the time it arrived, and can Allocate and restart as the real
// kubelet does (deleting every socket in its directory).
package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Kubelet is the fake. Its methods are safe for concurrent use.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	Dir string

	mu      sync.Mutex
	cond    *sync.Cond
	regs    []*pluginapi.RegisterRequest
	lists   map[string][]*pluginapi.Device // resource -> last list
	history map[string][]List              // resource -> every list of its latest stream
	ended   map[string]int                 // resource -> streams the plugin ended
	plugins map[string]*grpc.ClientConn    // resource -> connection
	g       *grpc.Server
	cancel  context.CancelFunc
	ctx     context.Context
}

// List is one ListAndWatch response and when it arrived.
type List struct {
	At      time.Time
	Devices []*pluginapi.Device
}

// Start serves kubelet.sock in dir.
func Start(dir string) (*Kubelet, error) {
	k := &Kubelet{Dir: dir}
	k.cond = sync.NewCond(&k.mu)
	return k, k.start()
}

func (k *Kubelet) start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lists, k.plugins, k.history = map[string][]*pluginapi.Device{}, map[string]*grpc.ClientConn{}, map[string][]List{}
	k.ended = map[string]int{}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	lis, err := net.Listen("unix", filepath.Join(k.Dir, "kubelet.sock"))
	if err != nil {
		return err
	}
	k.g = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.g, k)
	go func() { _ = k.g.Serve(lis) }()
	return nil
}

// Register is the kubelet's side of registration: it dials the plugin
// back inside the call, as the real device manager does.
func (k *Kubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", req.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.Dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	ctx := k.ctx
	if old := k.plugins[req.ResourceName]; old != nil {
		old.Close()
	}
	k.plugins[req.ResourceName] = conn
	k.history[req.ResourceName] = nil
	k.regs = append(k.regs, req)
	k.cond.Broadcast()
	k.mu.Unlock()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return nil, err
	}
	go k.watch(req.ResourceName, stream)
	return &pluginapi.Empty{}, nil
}

func (k *Kubelet) watch(resource string, stream pluginapi.DevicePlugin_ListAndWatchClient) {
	for {
		resp, err := stream.Recv()
		at := time.Now() // before the lock: the arrival, not our turn
		if err != nil {
			if errors.Is(err, io.EOF) { // the plugin ended it, not the fake
				k.mu.Lock()
				k.ended[resource]++
				k.cond.Broadcast()
				k.mu.Unlock()
			}
			return
		}
		devs := resp.Devices
		if devs == nil {
			devs = []*pluginapi.Device{} // an empty list, as sent; nil means none received
		}
		k.mu.Lock()
		k.lists[resource] = devs
		k.history[resource] = append(k.history[resource], List{At: at, Devices: devs})
		k.cond.Broadcast()
		k.mu.Unlock()
	}
}

// WaitEnded waits until a plugin of resource has ended its ListAndWatch
// stream (returned, rather than the fake closing it), or timeout passes,
// and returns the last list it had sent.
func (k *Kubelet) WaitEnded(resource string, timeout time.Duration) ([]*pluginapi.Device, error) {
	var devs []*pluginapi.Device
	err := k.await(timeout, func() bool {
		devs = k.lists[resource]
		return k.ended[resource] > 0
	})
	if err != nil {
		return devs, fmt.Errorf("%w waiting for the end of %s's stream (last list %v)", err, resource, devs)
	}
	return devs, nil
}

// Registrations returns every Register request received so far.
func (k *Kubelet) Registrations() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*pluginapi.RegisterRequest(nil), k.regs...)
}

// WaitFor waits until ok holds for the registrations and the last list of
// resource, or timeout passes.
func (k *Kubelet) WaitFor(resource string, timeout time.Duration, ok func(regs int, devs []*pluginapi.Device) bool) ([]*pluginapi.Device, error) {
	var n int
	var devs []*pluginapi.Device
	err := k.await(timeout, func() bool {
		n, devs = 0, k.lists[resource]
		for _, r := range k.regs {
			if r.ResourceName == resource {
				n++
			}
		}
		return ok(n, devs)
	})
	if err != nil {
		return devs, fmt.Errorf("%w waiting on %s (%d registrations, list %v)", err, resource, n, devs)
	}
	return devs, nil
}

// Await waits until done holds, or timeout passes. done sees, per
// resource, every list its latest stream delivered, oldest first; it runs
// with the Kubelet locked, after every registration and list, and must
// not keep or change what it is given.
func (k *Kubelet) Await(timeout time.Duration, done func(history map[string][]List) bool) error {
	return k.await(timeout, func() bool { return done(k.history) })
}

// await evaluates done under k.mu whenever something arrives, until it
// holds or timeout passes.
func (k *Kubelet) await(timeout time.Duration, done func() bool) error {
	timer := time.AfterFunc(timeout, func() { k.mu.Lock(); k.cond.Broadcast(); k.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	k.mu.Lock()
	defer k.mu.Unlock()
	for !done() {
		if !time.Now().Before(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		k.cond.Wait()
	}
	return nil
}

// History returns, per resource, every list its latest stream delivered.
func (k *Kubelet) History() map[string][]List {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string][]List, len(k.history))
	for res, h := range k.history {
		out[res] = append([]List(nil), h...)
	}
	return out
}

// Allocate calls the resource's plugin with one container request per
// element of ids.
func (k *Kubelet) Allocate(ctx context.Context, resource string, ids ...[]string) (*pluginapi.AllocateResponse, error) {
	k.mu.Lock()
	conn := k.plugins[resource]
	k.mu.Unlock()
	if conn == nil {
		return nil, fmt.Errorf("%s is not registered", resource)
	}
	req := &pluginapi.AllocateRequest{}
	for _, c := range ids {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: c})
	}
	return pluginapi.NewDevicePluginClient(conn).Allocate(ctx, req)
}

// ErrNotAdvertised is returned by PreferredAllocation for a plugin that
// did not advertise GetPreferredAllocation when it registered.
var ErrNotAdvertised = errors.New("the plugin does not offer GetPreferredAllocation")

// PreferredAllocation calls the resource's GetPreferredAllocation for one
// container request, as the kubelet does before Allocate, and only when
// the plugin's latest registration advertised it.
func (k *Kubelet) PreferredAllocation(ctx context.Context, resource string, available, mustInclude []string, size int) ([]string, error) {
	k.mu.Lock()
	conn := k.plugins[resource]
	advertised := false
	for _, r := range k.regs {
		if r.ResourceName == resource {
			advertised = r.Options.GetGetPreferredAllocationAvailable()
		}
	}
	k.mu.Unlock()
	if conn == nil {
		return nil, fmt.Errorf("%s is not registered", resource)
	}
	if !advertised {
		return nil, fmt.Errorf("%s: %w", resource, ErrNotAdvertised)
	}
	resp, err := pluginapi.NewDevicePluginClient(conn).GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size)},
		},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("%s: %d container responses to one request", resource, len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0].DeviceIDs, nil
}

// Restart stops the kubelet, deletes every socket in its directory (as a
// restarting kubelet does) and starts it again with a new kubelet.sock.
func (k *Kubelet) Restart() error {
	k.Stop()
	socks, _ := filepath.Glob(filepath.Join(k.Dir, "*.sock"))
	for _, s := range socks {
		_ = os.Remove(s)
	}
	return k.start()
}

// Stop closes the server and every plugin connection.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cancel()
	for _, c := range k.plugins {
		c.Close()
	}
	k.g.Stop()
	k.cond.Broadcast()
}

// Forget closes the connection to a resource's plugin, ending its stream
// without any socket changing, as a kubelet that lost a plugin does.
func (k *Kubelet) Forget(resource string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.plugins[resource]; c != nil {
		c.Close()
		delete(k.plugins, resource)
	}
}

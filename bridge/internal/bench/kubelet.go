package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// kubelet is the kubelet's device-manager side over real unix sockets,
// as bridge/deviceplugin/kubelettest is, but it keeps every list each
// ListAndWatch stream delivered with the time it arrived: propagation and
// start-up are measured from those times, and counting the lists tells a
// new one from an old one with the same content.
type kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir string

	mu      sync.Mutex
	cond    *sync.Cond
	streams map[string]*stream // by resource name
	g       *grpc.Server
	ctx     context.Context
	cancel  context.CancelFunc
}

// stream is what one registered resource sent.
type stream struct {
	conn  *grpc.ClientConn
	lists []list
}

// list is one ListAndWatch response and when it arrived.
type list struct {
	at   time.Time
	devs []*pluginapi.Device
}

// startKubelet serves kubelet.sock in dir.
func startKubelet(dir string) (*kubelet, error) {
	k := &kubelet{dir: dir, streams: map[string]*stream{}}
	k.cond = sync.NewCond(&k.mu)
	k.ctx, k.cancel = context.WithCancel(context.Background())
	lis, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		return nil, fmt.Errorf("kubelet socket: %w", err)
	}
	k.g = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.g, k)
	go func() { _ = k.g.Serve(lis) }()
	return k, nil
}

// Register dials the plugin back and opens its stream inside the call,
// as the real device manager does.
func (k *kubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", req.ResourceName, err)
	}
	s, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(k.ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ListAndWatch of %s: %w", req.ResourceName, err)
	}
	k.mu.Lock()
	if old := k.streams[req.ResourceName]; old != nil {
		old.conn.Close()
	}
	k.streams[req.ResourceName] = &stream{conn: conn}
	k.mu.Unlock()
	go k.watch(req.ResourceName, s)
	return &pluginapi.Empty{}, nil
}

func (k *kubelet) watch(resource string, s pluginapi.DevicePlugin_ListAndWatchClient) {
	for {
		resp, err := s.Recv()
		at := time.Now() // before the lock: the arrival, not our turn
		if err != nil {
			return
		}
		k.mu.Lock()
		if st := k.streams[resource]; st != nil {
			st.lists = append(st.lists, list{at: at, devs: resp.Devices})
		}
		k.cond.Broadcast()
		k.mu.Unlock()
	}
}

// counts returns how many lists each stream has delivered so far.
func (k *kubelet) counts() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.streams))
	for res, s := range k.streams {
		out[res] = len(s.lists)
	}
	return out
}

// quiet waits until no list has arrived on any stream for d, or
// timeout passes.
func (k *kubelet) quiet(d, timeout time.Duration) error {
	total := func() int {
		n := 0
		for _, c := range k.counts() {
			n += c
		}
		return n
	}
	deadline := time.Now().Add(timeout)
	for last := total(); time.Now().Before(deadline); {
		time.Sleep(d)
		now := total()
		if now == last {
			return nil
		}
		last = now
	}
	return fmt.Errorf("lists kept arriving for %v", timeout)
}

// firstLists returns when each stream's first list arrived, for the
// streams that have sent one.
func (k *kubelet) firstLists() map[string]time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]time.Time{}
	for res, s := range k.streams {
		if len(s.lists) > 0 {
			out[res] = s.lists[0].at
		}
	}
	return out
}

// waitList waits for the first list of resource, from index from on,
// that ok accepts, and returns it. A stream sends only lists that differ
// from its last, so when the list it sent last, before from, already
// fits, nothing new will come: that one is returned with a zero time,
// meaning no update was needed.
func (k *kubelet) waitList(resource string, from int, timeout time.Duration, ok func([]*pluginapi.Device) bool) (list, error) {
	return waitCond(k, timeout, func() (list, bool) {
		s := k.streams[resource]
		if s == nil || len(s.lists) == 0 {
			return list{}, false
		}
		for _, l := range s.lists[min(from, len(s.lists)):] {
			if ok(l.devs) {
				return l, true
			}
		}
		if last := s.lists[len(s.lists)-1]; len(s.lists) <= from && ok(last.devs) {
			return list{devs: last.devs}, true
		}
		return list{}, false
	}, func() string { return fmt.Sprintf("a list of %s from #%d on that fits", resource, from) })
}

// waitStreams waits until n streams have sent their first list.
func (k *kubelet) waitStreams(n int, timeout time.Duration) error {
	_, err := waitCond(k, timeout, func() (struct{}, bool) {
		got := 0
		for _, s := range k.streams {
			if len(s.lists) > 0 {
				got++
			}
		}
		return struct{}{}, got >= n
	}, func() string {
		return fmt.Sprintf("%d streams with a first list (have %d registered)", n, len(k.streams))
	})
	return err
}

// waitCond evaluates done under k.mu after every list until it holds or
// timeout passes.
func waitCond[T any](k *kubelet, timeout time.Duration, done func() (T, bool), what func() string) (T, error) {
	timer := time.AfterFunc(timeout, func() { k.mu.Lock(); k.cond.Broadcast(); k.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		if v, ok := done(); ok {
			return v, nil
		}
		if !time.Now().Before(deadline) {
			var zero T
			return zero, fmt.Errorf("waited %v for %s", timeout, what())
		}
		k.cond.Wait()
	}
}

// allocate calls resource's Allocate for one container with ids.
func (k *kubelet) allocate(ctx context.Context, resource string, ids []string) (*pluginapi.AllocateResponse, error) {
	k.mu.Lock()
	s := k.streams[resource]
	k.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%s is not registered", resource)
	}
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
	resp, err := pluginapi.NewDevicePluginClient(s.conn).Allocate(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("Allocate %s %v: %w", resource, ids, err)
	}
	return resp, nil
}

// stop closes the server and every plugin connection.
func (k *kubelet) stop() {
	k.cancel()
	k.g.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.streams {
		s.conn.Close()
	}
	k.cond.Broadcast()
}

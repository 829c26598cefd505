package deviceplugin

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
)

const wait = 10 * time.Second

// fakeHandler serves a settable device list and answers Allocate with
// one env var per device.
type fakeHandler struct {
	mu   sync.Mutex
	devs []Device
	subs []chan struct{}
}

func (h *fakeHandler) Devices() []Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Device(nil), h.devs...)
}

func (h *fakeHandler) Changes() (<-chan struct{}, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan struct{}, 1)
	h.subs = append(h.subs, ch)
	return ch, func() {}
}

func (h *fakeHandler) set(devs ...Device) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.devs = devs
	for _, ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (h *fakeHandler) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"DEVICES": strings.Join(c.DevicesIds, ",")}})
	}
	return resp, nil
}

func (h *fakeHandler) PreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return nil, nil
}

// startPlugins runs Plugins in dir, polling fast, with at most parallel
// registrations in flight (0: the default), and returns it.
func startPlugins(t *testing.T, dir string, log *slog.Logger, parallel int) (ps *Plugins, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ps = &Plugins{Logger: log, Dir: dir, PollInterval: 20 * time.Millisecond, StreamGrace: 200 * time.Millisecond, Parallel: parallel}
	done := make(chan struct{})
	go func() { _ = ps.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return ps, stop
}

// startPlugin serves cdi.example.com/cam with h.
func startPlugin(t *testing.T, dir string, h Handler) (stop func()) {
	ps, stop := startPlugins(t, dir, slog.New(slog.NewTextHandler(os.Stderr, nil)), 0)
	ps.Add(Spec{Resource: "cdi.example.com/cam", Handler: h, Preferred: true})
	return stop
}

func ids(devs []*pluginapi.Device) string {
	var out []string
	for _, d := range devs {
		out = append(out, d.ID+"="+d.Health)
	}
	return strings.Join(out, ",")
}

func TestLifecycle(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dp")
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	h := &fakeHandler{devs: []Device{{ID: "a", Healthy: true, NUMANodes: []int{1}}, {ID: "b"}}}
	stop := startPlugin(t, dir, h)
	const res = "cdi.example.com/cam"
	devs, err := k.WaitFor(res, wait, func(n int, d []*pluginapi.Device) bool { return n == 1 && len(d) == 2 })
	if err != nil {
		t.Fatal(err)
	}
	if ids(devs) != "a=Healthy,b=Unhealthy" || devs[0].Topology.Nodes[0].ID != 1 {
		t.Fatalf("first list %v", devs)
	}
	reg := k.Registrations()[0]
	if reg.Version != pluginapi.Version || !strings.HasPrefix(reg.Endpoint, "cdi.example.com_cam-") || !reg.Options.GetPreferredAllocationAvailable {
		t.Errorf("registration %+v", reg)
	}

	t.Run("a change reaches the stream", func(t *testing.T) {
		h.set(Device{ID: "a", Healthy: true}, Device{ID: "b", Healthy: true}, Device{ID: "c", Healthy: true})
		if _, err := k.WaitFor(res, wait, func(_ int, d []*pluginapi.Device) bool { return ids(d) == "a=Healthy,b=Healthy,c=Healthy" }); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("allocate", func(t *testing.T) {
		resp, err := k.Allocate(context.Background(), res, []string{"a", "c"}, []string{"b"})
		if err != nil || len(resp.ContainerResponses) != 2 || resp.ContainerResponses[0].Envs["DEVICES"] != "a,c" {
			t.Fatalf("Allocate = %v, %v", resp, err)
		}
	})
	t.Run("kubelet restart", func(t *testing.T) {
		if err := k.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := k.WaitFor(res, wait, func(n int, d []*pluginapi.Device) bool { return n == 2 && len(d) == 3 }); err != nil {
			t.Fatal(err)
		}
		if a, b := k.Registrations()[0].Endpoint, k.Registrations()[1].Endpoint; a == b {
			t.Errorf("both registrations used socket %s", a)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		// The stream ends without an empty list: the next bridge of a
		// rolling update may serve the resource already, and the kubelet
		// would apply the empty list to its registration too.
		stop()
		last, err := k.WaitEnded(res, wait)
		if err != nil {
			t.Fatal(err)
		}
		if ids(last) != "a=Healthy,b=Healthy,c=Healthy" {
			t.Errorf("the last list before the stream ended: %s, want the devices", ids(last))
		}
		if socks, _ := filepath.Glob(filepath.Join(dir, "cdi.example.com_cam-*.sock")); len(socks) != 0 {
			t.Errorf("sockets left after shutdown: %v", socks)
		}
	})
}

// A plugin started before the kubelet keeps trying and registers once
// the kubelet is up.
func TestRegistersWhenKubeletArrives(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dp")
	startPlugin(t, dir, &fakeHandler{devs: []Device{{ID: "a", Healthy: true}}})
	time.Sleep(300 * time.Millisecond) // let a few attempts fail
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	if _, err := k.WaitFor("cdi.example.com/cam", wait, func(n int, d []*pluginapi.Device) bool { return n >= 1 && len(d) == 1 }); err != nil {
		t.Fatal(err)
	}
}

func TestSocketName(t *testing.T) {
	now := time.Unix(0, 1234567890)
	a, b := SocketName("cdi.example.com/gpu-drm", now), SocketName("cdi.example.com/gpu-drm", now.Add(1))
	if a == b || !strings.HasPrefix(a, "cdi.example.com_gpu-drm-") || !strings.HasSuffix(a, ".sock") {
		t.Errorf("SocketName = %q, %q", a, b)
	}
}

// When the kubelet drops the stream and opens no other, the plugin
// registers again after StreamGrace.
func TestReregistersAfterDroppedStream(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dp")
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	startPlugin(t, dir, &fakeHandler{devs: []Device{{ID: "a", Healthy: true}}})
	const res = "cdi.example.com/cam"
	if _, err := k.WaitFor(res, wait, func(n int, d []*pluginapi.Device) bool { return n == 1 && len(d) == 1 }); err != nil {
		t.Fatal(err)
	}
	k.Forget(res)
	if _, err := k.WaitFor(res, wait, func(n int, _ []*pluginapi.Device) bool { return n == 2 }); err != nil {
		t.Fatal(err)
	}
}

// The socket is 0600 whatever the umask: under umask 000 it was 0777.
func TestSocketMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := kubelettest.SocketDir(t, "dp")
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	startPlugin(t, dir, &fakeHandler{devs: []Device{{ID: "a", Healthy: true}}})
	if _, err := k.WaitFor("cdi.example.com/cam", wait, func(n int, _ []*pluginapi.Device) bool { return n >= 1 }); err != nil {
		t.Fatal(err)
	}
	socks, _ := filepath.Glob(filepath.Join(dir, "cdi.example.com_cam-*.sock"))
	if len(socks) != 1 {
		t.Fatalf("sockets %v, want one", socks)
	}
	if fi, err := os.Stat(socks[0]); err != nil || fi.Mode().Perm() != SocketMode {
		t.Fatalf("socket mode %v (%v), want %v", fi.Mode().Perm(), err, os.FileMode(SocketMode))
	}
}

// Sockets of the domain that nothing serves (left by a SIGKILL) are
// removed; a served one, another domain's, and a plain file are kept.
func TestRemoveStaleSockets(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dp")
	listen := func(name string, serve bool) {
		l, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if serve {
			t.Cleanup(func() { l.Close() })
			return
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
	}
	listen("cdi.example.com_gpu-a.sock", false)
	listen("cdi.example.com_gpu-b.sock", false)
	listen("cdi.example.com_cam-live.sock", true)
	listen("other.example.com_gpu-a.sock", false)
	listen("kubelet.sock", false)
	if err := os.WriteFile(filepath.Join(dir, "cdi.example.com_file.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveStaleSockets(dir, "cdi.example.com")
	if err != nil || !reflect.DeepEqual(removed, []string{"cdi.example.com_gpu-a.sock", "cdi.example.com_gpu-b.sock"}) {
		t.Fatalf("removed %v, %v; want the two unserved gpu sockets", removed, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 4 {
		t.Errorf("left %v, want the served, other-domain, kubelet and plain files", left)
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Without a kubelet, nothing is attempted and the wait is logged once,
// not once per plugin per retry; when kubelet.sock appears, every plugin
// registers.
func TestWaitsQuietlyForTheKubelet(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dp")
	var log syncBuffer
	ps, _ := startPlugins(t, dir, slog.New(slog.NewTextHandler(&log, nil)), 0)
	resources := []string{"cdi.example.com/a", "cdi.example.com/b", "cdi.example.com/c"}
	for _, res := range resources {
		ps.Add(Spec{Resource: res, Handler: &fakeHandler{devs: []Device{{ID: "x", Healthy: true}}}})
	}
	time.Sleep(300 * time.Millisecond) // fifteen polls
	if socks, _ := filepath.Glob(filepath.Join(dir, "*.sock")); len(socks) != 0 {
		t.Errorf("sockets served with no kubelet to register with: %v", socks)
	}
	if n := strings.Count(log.String(), "level="); n != 1 || !strings.Contains(log.String(), "waiting for the kubelet") {
		t.Errorf("log without a kubelet, want one line saying it waits:\n%s", log.String())
	}
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	for _, res := range resources {
		if _, err := k.WaitFor(res, wait, func(n int, d []*pluginapi.Device) bool { return n == 1 && len(d) == 1 }); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("errors logged:\n%s", log.String())
	}
}

// A removed plugin's stream gets an empty list and its socket goes; the
// others serve on.
func TestRemove(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dp")
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	ps, _ := startPlugins(t, dir, slog.New(slog.DiscardHandler), 0)
	h := &fakeHandler{devs: []Device{{ID: "x", Healthy: true}}}
	ps.Add(Spec{Resource: "cdi.example.com/a", Handler: h})
	ps.Add(Spec{Resource: "cdi.example.com/b", Handler: h})
	for _, res := range []string{"cdi.example.com/a", "cdi.example.com/b"} {
		if _, err := k.WaitFor(res, wait, func(n int, d []*pluginapi.Device) bool { return n == 1 && len(d) == 1 }); err != nil {
			t.Fatal(err)
		}
	}
	ps.Remove("cdi.example.com/a")
	if _, err := k.WaitFor("cdi.example.com/a", wait, func(_ int, d []*pluginapi.Device) bool { return d != nil && len(d) == 0 }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for socks, _ := filepath.Glob(filepath.Join(dir, "cdi.example.com_a-*.sock")); len(socks) > 0; socks, _ = filepath.Glob(filepath.Join(dir, "cdi.example.com_a-*.sock")) {
		if time.Now().After(deadline) {
			t.Fatalf("socket of the removed plugin still there: %v", socks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.set(Device{ID: "x", Healthy: true}, Device{ID: "y", Healthy: true})
	if _, err := k.WaitFor("cdi.example.com/b", wait, func(n int, d []*pluginapi.Device) bool { return n == 1 && len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
}

// Many plugins register through a few workers, each once.
func TestManyPlugins(t *testing.T) {
	dir := kubelettest.SocketDir(t, "dp")
	k, err := kubelettest.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	ps, stop := startPlugins(t, dir, slog.New(slog.DiscardHandler), 3)
	const n = 300
	h := &fakeHandler{devs: []Device{{ID: "x", Healthy: true}}}
	for i := range n {
		ps.Add(Spec{Resource: "cdi.example.com/r" + strconv.Itoa(i), Handler: h})
	}
	err = k.Await(wait, func(history map[string][]kubelettest.List) bool { return len(history) == n })
	if err != nil {
		t.Fatal(err)
	}
	if regs := len(k.Registrations()); regs != n {
		t.Errorf("%d registrations of %d plugins", regs, n)
	}
	stop()
	if socks, _ := filepath.Glob(filepath.Join(dir, "cdi.example.com_*.sock")); len(socks) != 0 {
		t.Errorf("%d sockets left after Run returned", len(socks))
	}
}

// A directory listing that lacks a registered plugin's socket, as one
// read just before the registration finished does, does not make it due
// while the socket is there; once the socket is gone, it is.
func TestDueLooksUpSocketsTheListingLacks(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "cam.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ps := &Plugins{Dir: dir}
	ps.init()
	reg := &registration{sock: sock, srv: newServer(Spec{Handler: &fakeHandler{}})}
	ps.plugins["cdi.example.com/cam"] = &plugin{Spec: Spec{Resource: "cdi.example.com/cam"}, reg: reg}
	w := &watcher{ps: ps}
	if due := w.due(false, map[string]bool{}); len(due) != 0 {
		t.Fatalf("%d plugins due with their socket there", len(due))
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	if due := w.due(false, map[string]bool{}); len(due) != 1 {
		t.Fatalf("%d plugins due with their socket gone, want 1", len(due))
	}
}

package reclaim

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/spec"
)

// kubelet is the kubelet's PodResources API on a unix socket, with what
// its containers hold: resource name -> device ids.
type kubelet struct{ *kubelettest.PodResources }

// set says what the containers hold, plus another vendor's device, which
// must not confuse the reclaimer.
func (k kubelet) set(held map[string][]string) {
	all := map[string][]string{"nvidia.com/gpu": {"cam-1-1"}}
	for res, ids := range held {
		all[res] = ids
	}
	k.Set(all)
}

func serve(t *testing.T) (kubelet, podresourcesapi.PodResourcesListerClient) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	pods, err := kubelettest.ServePodResources(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pods.Stop)
	k := kubelet{pods}
	conn, client, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return k, client
}

// plugins records DEL and GC; delErr is what DEL answers, allocs what
// LIST answers, by the pools' first.
type plugins struct {
	mu     sync.Mutex
	dels   []string
	gcs    map[string][]string
	delErr error
	allocs map[string][]spec.Allocation
	// elsewhere is what HeldElsewhere was last told, by the pools.
	elsewhere map[string]map[string]bool
}

func (p *plugins) List(_ context.Context, pools []string) ([]spec.Allocation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allocs[pools[0]], nil
}

func (p *plugins) HeldElsewhere(pools []string, devices map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.elsewhere == nil {
		p.elsewhere = map[string]map[string]bool{}
	}
	p.elsewhere[strings.Join(pools, ",")] = devices
}

func (p *plugins) Del(_ context.Context, pool, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dels = append(p.dels, pool+"/"+id)
	return p.delErr
}

func (p *plugins) GC(_ context.Context, pools []string, valid []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gcs[strings.Join(pools, ",")] = valid
	return nil
}

// Pools: the cameras share their drop-in with the microphones.
func (p *plugins) Pools() [][]string { return [][]string{{"cam", "mic"}, {"gpu"}} }

// setup: node a holds cam-1-0 (IL) and cam-1-1 as vdev 3 (CL); node b
// holds cam-1-2.
func setup(t *testing.T) (*Reclaimer, kubelet, *plugins, *time.Time, instance.Store) {
	ctx := context.Background()
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	cam := instance.Instance{Name: "cam-1", Config: "cam", DeviceID: "lobby", Shared: true, Capacity: 3}
	for _, n := range []string{"a", "b"} {
		if err := store.Observe(ctx, n, "cam", []instance.Instance{cam}); err != nil {
			t.Fatal(err)
		}
	}
	err := store.Claim(ctx, []instance.Claim{
		{Instance: "cam-1", Slot: "cam-1-0", Value: "a"}, {Instance: "cam-1", Slot: "cam-1-1", Value: "C:3:a"},
		{Instance: "cam-1", Slot: "cam-1-2", Value: "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	k, client := serve(t)
	p := &plugins{gcs: map[string][]string{}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Reclaimer{Lister: client, Store: store, Plugins: p, Node: "a", Domain: "cdi.local",
		Tracker: NewTracker(time.Minute), Lock: &sync.Mutex{}, Now: func() time.Time { return now }}
	return r, k, p, &now, store
}

func usage(t *testing.T, s instance.Store) map[string]string {
	all, err := s.List(context.Background())
	if err != nil || len(all) != 1 {
		t.Fatalf("List = %v, %v", all, err)
	}
	return all[0].Usage
}

func TestReclaimAfterGrace(t *testing.T) {
	r, k, p, now, store := setup(t)
	ctx := context.Background()
	k.set(map[string][]string{"cdi.local/cam-1": {"cam-1-0"}}) // the CL container is gone
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(59 * time.Second)
	if err := r.Once(ctx); err != nil || len(p.dels) != 0 || usage(t, store)["cam-1-1"] != "C:3:a" {
		t.Fatalf("before the grace: err %v, DELs %v, usage %v", err, p.dels, usage(t, store))
	}
	*now = now.Add(time.Second)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	u := usage(t, store)
	if !slices.Equal(p.dels, []string{"cam/cam-1-1"}) || u["cam-1-1"] != "" || u["cam-1-0"] != "a" || u["cam-1-2"] != "b" {
		t.Fatalf("after the grace: DELs %v, usage %v; want only cam-1-1 released", p.dels, u)
	}
	if !slices.Equal(p.gcs["cam,mic"], []string{"cam-1-0"}) || p.gcs["gpu"] == nil || len(p.gcs["gpu"]) != 0 || len(p.gcs) != 2 {
		t.Fatalf("GC valid sets %v, want cam,mic: [cam-1-0], gpu: []", p.gcs)
	}
}

func TestHeldSlotNeverReclaimed(t *testing.T) {
	r, k, p, now, store := setup(t)
	k.set(map[string][]string{"cdi.local/cam-1": {"cam-1-0"}, "cdi.local/cam": {"3"}})
	for range 10 {
		if err := r.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		*now = now.Add(time.Hour)
	}
	if len(p.dels) != 0 || usage(t, store)["cam-1-1"] != "C:3:a" {
		t.Fatalf("held slots released: DELs %v, usage %v", p.dels, usage(t, store))
	}
}

func TestFailedDelKeepsClaim(t *testing.T) {
	r, _, p, now, store := setup(t)
	ctx := context.Background()
	p.delErr = errors.New("plugin timed out")
	r.Once(ctx)
	*now = now.Add(time.Minute)
	if err := r.Once(ctx); err == nil || usage(t, store)["cam-1-0"] != "a" {
		t.Fatalf("DEL failed: err %v, usage %v; want an error and the claim kept", err, usage(t, store))
	}
	p.delErr = spec.NewError(spec.CodeUnknownRequestID, "") // the plugin had already forgotten it
	if err := r.Once(ctx); err != nil || usage(t, store)["cam-1-0"] != "" || usage(t, store)["cam-1-1"] != "" {
		t.Fatalf("DEL said unknown request-id: err %v, usage %v; want both of a's slots free", err, usage(t, store))
	}
}

func TestKubeletDown(t *testing.T) {
	r, _, _, _, _ := setup(t)
	conn, client, err := Dial(filepath.Join(t.TempDir(), "absent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r.Lister = client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.Once(ctx); err == nil {
		t.Fatal("a pass without a kubelet succeeded")
	}
}

// partial is a store whose List lacks one pool, as the Kubernetes store's
// does while that pool's first list has not come.
type partial struct {
	instance.Store
	lacks string
}

func (p partial) List(ctx context.Context) ([]instance.Instance, error) {
	all, err := p.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(all, func(in instance.Instance) bool { return in.Config == p.lacks })
	return out, &instance.IncompleteError{Pools: []string{p.lacks}, Err: errors.New("not listed yet")}
}

// A pool not listed yet (gpu) leaves the other pools' reclaim alone: the
// slot due is released and the cameras' drop-in is told what stays valid;
// the GPUs' drop-in, whose claims cannot be told, is not told anything.
func TestReclaimWithAPoolNotListed(t *testing.T) {
	r, k, p, now, store := setup(t)
	r.Store = partial{Store: store, lacks: "gpu"}
	ctx := context.Background()
	k.set(map[string][]string{"cdi.local/cam-1": {"cam-1-0"}})
	if err := r.Once(ctx); !errors.Is(err, instance.ErrIncomplete) {
		t.Fatalf("Once with a pool not listed: %v, want ErrIncomplete", err)
	}
	*now = now.Add(time.Minute)
	if err := r.Once(ctx); !errors.Is(err, instance.ErrIncomplete) {
		t.Fatalf("Once with a pool not listed: %v, want ErrIncomplete", err)
	}
	if u := usage(t, store); !slices.Equal(p.dels, []string{"cam/cam-1-1"}) || u["cam-1-1"] != "" {
		t.Fatalf("DELs %v, usage %v; want cam-1-1 released", p.dels, u)
	}
	if _, ok := p.gcs["gpu"]; ok || !slices.Equal(p.gcs["cam,mic"], []string{"cam-1-0"}) {
		t.Fatalf("GC valid sets %v, want cam,mic: [cam-1-0] and no GC of the pool not listed", p.gcs)
	}
}

func (p *plugins) delsNow() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.dels)
	slices.Sort(out)
	return out
}

// podLister is the kubelet's PodResources with one pod or none.
type podLister struct {
	mu   sync.Mutex
	resp *podresourcesapi.ListPodResourcesResponse
}

// set lists pod (none for "") holding held: resource to device ids.
func (l *podLister) set(pod string, held map[string][]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resp = &podresourcesapi.ListPodResourcesResponse{}
	if pod == "" {
		return
	}
	c := &podresourcesapi.ContainerResources{Name: "c"}
	for res, ids := range held {
		c.Devices = append(c.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: ids})
	}
	l.resp.PodResources = []*podresourcesapi.PodResources{{Namespace: "default", Name: pod, Containers: []*podresourcesapi.ContainerResources{c}}}
}

func (l *podLister) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resp, nil
}

// Run asks the kubelet every HolderEvery whether the pods holding slots
// still run; one it no longer lists is asked of the API server
// (PodEnded): ended, its slots go at once; still running (the kubelet
// restarting, not listing its pods for a while), they wait for the
// grace. The fake clock never moves: only the pod's end frees a slot.
func TestHolderNoLongerListedIsAskedOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ended bool
		want  []string
	}{
		{name: "the API server says it ended", ended: true, want: []string{"cam/cam-1-0", "cam/cam-1-1"}},
		{name: "the API server says it runs", ended: false, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, p, _, _ := setup(t)
			k := &podLister{}
			r.Lister = k
			var mu sync.Mutex
			var asked []string
			r.HolderEvery = 10 * time.Millisecond
			r.PodEnded = func(_ context.Context, pod string) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, pod)
				return tc.ended, nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			k.set("app", map[string][]string{"cdi.local/cam-1": {"cam-1-0"}, "cdi.local/cam": {"3"}})
			done := make(chan struct{})
			go func() { defer close(done); r.Run(ctx, time.Hour) }()
			time.Sleep(100 * time.Millisecond) // the first pass sees the holder
			k.set("", nil)
			deadline := time.Now().Add(5 * time.Second)
			for len(p.delsNow()) < len(tc.want) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !tc.ended {
				time.Sleep(200 * time.Millisecond) // twenty holder checks
			}
			cancel()
			<-done
			if dels := p.delsNow(); !slices.Equal(dels, tc.want) {
				t.Errorf("DELs %v, want %v", dels, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) == 0 || asked[0] != "default/app" {
				t.Errorf("asked the API server of %v, want default/app", asked)
			}
		})
	}
}

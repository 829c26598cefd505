package reclaim

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
)

// TestAdversaryRecreatedPodSlotFreedOnKubeletRestart: a StatefulSet pod
// (default/web-0) that held a slot is deleted; the kubelet drops it, the
// API server says NotFound, and its slot goes at once (as meant). The
// StatefulSet recreates default/web-0 on this node within the grace; the
// new pod is admitted and its Allocate claims the slot. Then the kubelet
// restarts and, for a moment, lists no pods (the case the grace and the
// API read are there for). The new web-0 still runs, and the API server
// would say so, but the Reclaimer never asks: the old pod's name stays
// in its ended set for the whole grace, keyed by <namespace>/<name>, not
// by the pod's UID, and any pass that does not find that name listed
// releases every slot whose last holder had that name. The running pod's
// slot is DEL'd on the plugin and freed in the store, where another pod
// (on any node) can be given the same device. An operator cares: a
// StatefulSet roll followed by a kubelet restart (an upgrade, a config
// change) within 5 minutes takes devices from under running pods.
func TestAdversaryRecreatedPodSlotFreedOnKubeletRestart(t *testing.T) {
	r, _, p, now, store := setup(t)
	ctx := context.Background()
	k := &podLister{}
	r.Lister = k
	apiSaysEnded := true // the old web-0: NotFound
	var asked []string
	r.PodEnded = func(_ context.Context, pod string) (bool, error) {
		asked = append(asked, pod)
		return apiSaysEnded, nil
	}
	// The old web-0 holds cam-1-0 (IL).
	k.set("web-0", map[string][]string{"cdi.local/cam-1": {"cam-1-0"}, "cdi.local/cam": {"3"}})
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	// The old web-0 is deleted: the kubelet drops it, the API says NotFound.
	k.set("", nil)
	*now = now.Add(2 * time.Second)
	r.askHolders(ctx) // Run's look between passes
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if dels := p.delsNow(); !slices.Equal(dels, []string{"cam/cam-1-0", "cam/cam-1-1"}) {
		t.Fatalf("the old web-0's slots not released at once: DELs %v", dels)
	}
	// The new web-0 (another UID) lands on this node; Allocate claims
	// cam-1-0 again, and the kubelet lists the pod holding it.
	if err := store.Claim(ctx, []instance.Claim{{Instance: "cam-1", Slot: "cam-1-0", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	apiSaysEnded = false // the API server has the new web-0, Running
	k.set("web-0", map[string][]string{"cdi.local/cam-1": {"cam-1-0"}})
	*now = now.Add(5 * time.Second)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(p.delsNow())
	// The kubelet restarts: for a moment it lists no pods.
	k.set("", nil)
	*now = now.Add(10 * time.Second) // well within the 1-minute grace
	r.askHolders(ctx)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if dels := p.delsNow(); len(dels) != before || usage(t, store)["cam-1-0"] != "a" {
		t.Errorf("the new, running web-0's slot released while the kubelet restarted, 10 s into a 1 min grace: "+
			"DELs %v, usage %v; the API server was asked of %v (it would say the new web-0 runs)", dels, usage(t, store), asked)
	}
}

// countingStore counts the passes (each lists the store once).
type countingStore struct {
	instance.Store
	lists atomic.Int64
}

func (c *countingStore) List(ctx context.Context) ([]instance.Instance, error) {
	c.lists.Add(1)
	return c.Store.List(ctx)
}

// TestAdversaryRecreatedPodPassesEverySecond: after a StatefulSet pod
// (default/web-0) that held slots ended, a new pod of the same name that
// the kubelet lists keeps endedListed set, so Run makes a full pass every
// second (endedRecheck) until the old name is forgotten: for the whole
// grace (5 minutes by default), not the period. Each pass takes the
// node's Allocate lock exclusively, lists the Instance store, and runs
// LIST and GC on every drop-in's plugin. An operator cares: every
// StatefulSet roll on a node means ~300 extra passes (plugin executions,
// Allocate stalls) in the next 5 minutes, per node.
func TestAdversaryRecreatedPodPassesEverySecond(t *testing.T) {
	r, _, _, _, store := setup(t)
	cs := &countingStore{Store: store}
	r.Store = cs
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &podLister{}
	r.Lister = k
	var ended atomic.Bool
	ended.Store(true)
	r.PodEnded = func(context.Context, string) (bool, error) { return ended.Load(), nil }
	r.HolderEvery = 50 * time.Millisecond
	k.set("web-0", map[string][]string{"cdi.local/cam-1": {"cam-1-0"}})
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	k.set("", nil) // the old web-0 deleted
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	// The new web-0 holds a slot (cam-1-1 as vdev 3 is still claimed).
	ended.Store(false)
	k.set("web-0", map[string][]string{"cdi.local/cam": {"3"}})
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, time.Hour) }()
	time.Sleep(100 * time.Millisecond)
	start := cs.lists.Load()
	time.Sleep(3500 * time.Millisecond)
	passes := cs.lists.Load() - start
	cancel()
	<-done
	if passes > 1 {
		t.Errorf("%d passes in 3.5 s with a period of an hour and nothing ended: a running pod that reuses an ended pod's name "+
			"makes a pass every second for the whole grace", passes)
	}
}

// manyPods is the kubelet's PodResources listing n pods (default/p<i>),
// each holding Instance-level slot big-<i> of Instance big, or none.
type manyPods struct {
	mu   sync.Mutex
	none bool
	n    int
}

func (m *manyPods) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	resp := &podresourcesapi.ListPodResourcesResponse{}
	if m.none {
		return resp, nil
	}
	for i := range m.n {
		resp.PodResources = append(resp.PodResources, &podresourcesapi.PodResources{Namespace: "default", Name: fmt.Sprintf("p%d", i),
			Containers: []*podresourcesapi.ContainerResources{{Name: "c", Devices: []*podresourcesapi.ContainerDevices{
				{ResourceName: "cdi.local/big", DeviceIds: []string{fmt.Sprintf("big-%d", i)}}}}}})
	}
	return resp, nil
}

// TestAdversarySlowAPIStallsPasses: the holders' API reads run one after
// another, each bounded (5 s in production, podEndedTimeout), before
// every pass (Once calls askHolders) and in Run's wait loop. With the
// API server slow or blackholed and n holders the kubelet does not list
// (a kubelet restart, a node drained), a pass starts only after n reads
// have timed out: 20 holders is 100 s, 200 holders over 16 minutes. The
// slots due by the grace and the plugins' GC wait that long, and a
// pod's end told meanwhile is not acted on. Here each read takes 100 ms
// (standing for the 5 s bound): the pass must not wait 20 of them.
func TestAdversarySlowAPIStallsPasses(t *testing.T) {
	const n = 20
	const read = 100 * time.Millisecond
	ctx := context.Background()
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	big := instance.Instance{Name: "big", Config: "cam", DeviceID: "lobby", Shared: true, Capacity: n}
	if err := store.Observe(ctx, "a", "cam", []instance.Instance{big}); err != nil {
		t.Fatal(err)
	}
	var claims []instance.Claim
	for i := range n {
		claims = append(claims, instance.Claim{Instance: "big", Slot: fmt.Sprintf("big-%d", i), Value: "a"})
	}
	if err := store.Claim(ctx, claims); err != nil {
		t.Fatal(err)
	}
	k := &manyPods{n: n}
	p := &plugins{gcs: map[string][]string{}}
	r := &Reclaimer{Lister: k, Store: store, Plugins: p, Node: "a", Domain: "cdi.local",
		Tracker: NewTracker(time.Minute), Lock: &sync.Mutex{},
		PodEnded: func(ctx context.Context, _ string) (bool, error) {
			select { // a blackholed API server: the bounded read times out
			case <-time.After(read):
				return false, context.DeadlineExceeded
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}}
	if err := r.Once(ctx); err != nil { // the holders seen
		t.Fatal(err)
	}
	k.mu.Lock()
	k.none = true // the kubelet restarts and lists nothing
	k.mu.Unlock()
	start := time.Now()
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*read {
		t.Errorf("one pass took %v, %d bounded API reads of %v one after another before it even started: "+
			"at the production bound of 5 s that is %v per pass", took.Round(time.Millisecond), n, read, time.Duration(n)*5*time.Second)
	}
}

package node

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/spec"
)

// A change wakes the streams whose lists it changes, not every stream of
// the node: on a node of thousands of devices, one claim must not make
// thousands of streams re-read their lists.
func TestRebuildViewsNamesChangedLists(t *testing.T) {
	n := New(Config{NodeName: "n1", Domain: "cdi.test"})
	p := discovery.Pool{Name: "cams", Devices: []spec.DeviceInfo{
		{ID: "a", Healthy: true, Capacity: 2}, {ID: "b", Healthy: true, Capacity: 2}, {ID: "c", Healthy: true, Capacity: 2}}}
	n.pools = map[string]discovery.Pool{"cams": p}
	seen := n.seen(p)
	set := func(ins []instance.Instance) {
		n.instances = map[string]instance.Instance{}
		for _, in := range ins {
			in.Usage = maps(in.Usage)
			n.instances[in.Name] = in
		}
	}
	for i := range seen {
		seen[i].Usage, seen[i].Nodes = map[string]string{}, []string{"n1"}
	}
	b, c := n.resource(seen[1].Name), n.resource(seen[2].Name)
	set(seen)
	if got := sorted(n.rebuildViews()); len(got) != 4 {
		t.Fatalf("first build changed %v, want the pool's and its three instances' lists", got)
	}
	for _, step := range []struct {
		name   string
		change func()
		want   []string
	}{
		{"nothing changed", func() {}, nil},
		// This node's own claims change no list: the kubelet keeps
		// track of what it allocated.
		{"a claim on a by this node", func() { seen[0].Usage[instance.SlotID(seen[0].Name, 0)] = instance.InstanceLevelUsage("n1") }, nil},
		{"a claim on c by another node", func() { seen[2].Usage[instance.SlotID(seen[2].Name, 1)] = instance.InstanceLevelUsage("n2") }, []string{c}},
		{"b full: its placeholder leaves the pool's list", func() {
			seen[1].Usage[instance.SlotID(seen[1].Name, 0)] = instance.InstanceLevelUsage("n2")
			seen[1].Usage[instance.SlotID(seen[1].Name, 1)] = instance.InstanceLevelUsage("n2")
		}, sorted([]string{b, "cdi.test/cams"})},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.change()
			set(seen)
			if got := sorted(n.rebuildViews()); !reflect.DeepEqual(got, step.want) {
				t.Errorf("changed %v, want %v", got, step.want)
			}
		})
	}
	t.Run("the pool goes", func(t *testing.T) {
		n.pools = map[string]discovery.Pool{}
		if got := n.rebuildViews(); len(got) != 4 {
			t.Errorf("changed %v, want all four lists (now empty)", got)
		}
	})
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	sort.Strings(s)
	return s
}

// listGate is a store whose first List reads the Instances, then waits
// for release before answering, as a read the scheduler paused would.
type listGate struct {
	instance.Store
	first   sync.Once
	paused  chan struct{} // closed once the first List has read
	release chan struct{}
	later   chan struct{} // receives when a later List has read
}

func (g *listGate) List(ctx context.Context) ([]instance.Instance, error) {
	all, err := g.Store.List(ctx)
	isFirst := false
	g.first.Do(func() { isFirst = true })
	if !isFirst {
		select {
		case g.later <- struct{}{}:
		default:
		}
		return all, err
	}
	close(g.paused)
	<-g.release
	return all, err
}

// Two refreshes at once (a discovery and a store change) leave the views
// on the later read of the store. Before, the refresh that read first
// could build last, and the node offered a pool without a device the
// store had until the next change: a node of a three-camera pool listed
// two cameras for good.
func TestRefreshesBuildOnTheLatestRead(t *testing.T) {
	ctx := context.Background()
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	gate := &listGate{Store: store, paused: make(chan struct{}), release: make(chan struct{}), later: make(chan struct{}, 1)}
	n := New(Config{NodeName: "n1", Domain: "cdi.test", Store: gate})
	p := discovery.Pool{Name: "cams", Devices: []spec.DeviceInfo{
		{ID: "a", Healthy: true, Capacity: 1, Shared: true}, {ID: "b", Healthy: true, Capacity: 1, Shared: true}}}
	n.pools = map[string]discovery.Pool{"cams": p}
	seen := n.seen(p)
	if err := store.Observe(ctx, "n1", "cams", seen[:1]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { n.refresh(ctx) }) // reads a only, then pauses
	<-gate.paused
	if err := store.Observe(ctx, "n1", "cams", seen); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { n.refresh(ctx) }) // reads a and b
	// Unserialized, the second refresh reads now; serialized, it reads
	// only after the first ends: release the first either way.
	select {
	case <-gate.later:
	case <-time.After(200 * time.Millisecond):
	}
	close(gate.release)
	wg.Wait()
	v, _ := n.view("cams")
	if len(v.instances) != 2 {
		t.Fatalf("the view holds %d instances after both refreshes, want the 2 of the later read", len(v.instances))
	}
}

// partialStore is a store whose List lacks one pool while lacking is set,
// as the Kubernetes store's does while that pool's first list has not
// come.
type partialStore struct {
	instance.Store
	lacking atomic.Pointer[string]
}

func (p *partialStore) List(ctx context.Context) ([]instance.Instance, error) {
	all, err := p.Store.List(ctx)
	lacks := p.lacking.Load()
	if err != nil || lacks == nil {
		return all, err
	}
	out := slices.DeleteFunc(all, func(in instance.Instance) bool { return in.Config == *lacks })
	return out, &instance.IncompleteError{Pools: []string{*lacks}, Err: errors.New("not listed yet")}
}

// A pool the store has not listed (a drop-in just added, its list slow)
// does not freeze the others: a claim another node makes on a camera
// reaches the cameras' view, and the view of the pool not listed keeps
// what it had.
func TestRefreshWithAPoolNotListed(t *testing.T) {
	ctx := context.Background()
	files := local.New(filepath.Join(t.TempDir(), "instances.json"))
	store := &partialStore{Store: files}
	n := New(Config{NodeName: "n1", Domain: "cdi.test", Store: store})
	cams := discovery.Pool{Name: "cams", Devices: []spec.DeviceInfo{{ID: "a", Healthy: true, Capacity: 1, Shared: true}}}
	dogs := discovery.Pool{Name: "dogs", Devices: []spec.DeviceInfo{{ID: "rex", Healthy: true, Capacity: 1}}}
	n.pools = map[string]discovery.Pool{"cams": cams, "dogs": dogs}
	for _, p := range []discovery.Pool{cams, dogs} {
		if err := files.Observe(ctx, "n1", p.Name, n.seen(p)); err != nil {
			t.Fatal(err)
		}
	}
	n.refresh(ctx)
	lacks := "dogs"
	store.lacking.Store(&lacks)
	cam := n.seen(cams)[0]
	if err := files.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: instance.SlotID(cam.Name, 0), Value: "n2"}}); err != nil {
		t.Fatal(err)
	}
	n.refresh(ctx)
	if v, _ := n.view("cams"); len(v.instances) != 1 || v.instances[0].Usage[instance.SlotID(cam.Name, 0)] != "n2" {
		t.Fatalf("the cameras' view %+v, want n2's claim", v.instances)
	}
	if v, _ := n.view("dogs"); len(v.instances) != 1 {
		t.Fatalf("the view of the pool not listed holds %d instances, want the 1 it had", len(v.instances))
	}
}

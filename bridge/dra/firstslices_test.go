package dra_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// TestFirstSlices runs NodeSlices against a real API server, a Node of
// its own for each case. On a node with none of the driver's slices the
// first publish's slices are created before the controller starts, and
// the controller then adopts them: it creates none (no second set) and
// the node's slices are the pool's, once each. A node that has slices is
// left to the controller. A failed create or a stop half-way leaves none
// of the created slices, nor one whose create's answer was lost (the
// controller, started after, creates them all; or none are left); a publish while they are created wins.
func TestFirstSlices(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	three := poolOf(3)
	for _, tc := range []struct {
		name string
		// failCreate fails the nth POST of a ResourceSlice (1-based), 0 none.
		failCreate int
		// lose: the failed POST is made, its answer lost.
		lose bool
		// left is a slice on the node before the start.
		left bool
		// lists: client-go's watch-list is off, its informers LIST.
		lists bool
		// during is called before the create after the second.
		during func(s *dra.NodeSlices, stop context.CancelFunc)
		// then is what the API server holds at the end, as devices per
		// slice index; nil: none.
		want        [][]string
		wantWritten int
		wantCreates int64
	}{
		{name: "fresh node", want: devicesOf(three), wantWritten: 3},
		{name: "fresh node listed", lists: true, want: devicesOf(three), wantWritten: 3},
		{name: "slices left", left: true, want: devicesOf(three), wantCreates: 3},
		{name: "failed create", failCreate: 3, want: devicesOf(three), wantCreates: 3},
		{name: "answer of a create lost", failCreate: 3, lose: true, want: devicesOf(three), wantCreates: 3},
		{name: "stopped half-way", during: func(_ *dra.NodeSlices, stop context.CancelFunc) { stop() }},
		{name: "publish during the creates", during: func(s *dra.NodeSlices, _ context.CancelFunc) { s.Publish(poolOf(2)) },
			want: devicesOf(poolOf(2)), wantWritten: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := strings.ReplaceAll(tc.name, " ", "-")
			if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.left {
				left := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "left-by-the-last-bridge"}, Spec: resourceapi.ResourceSliceSpec{
					Driver: "cdi.local", NodeName: &node, Pool: resourceapi.ResourcePool{Name: "p", Generation: 1, ResourceSliceCount: 1},
					Devices: []resourceapi.Device{{Name: "left"}}}}
				if _, err := admin.ResourceV1().ResourceSlices().Create(t.Context(), left, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.lists {
				setWatchList(t, false)
			}
			var lists listVersions
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			s := dra.StartNodeSlices(ctx, "cdi.local", node, failingClient(t, env.Config, tc.failCreate, tc.lose, &lists), func(_ context.Context, err error, msg string) {
				t.Logf("%s: %v", msg, err)
			})
			defer s.Stop()
			if tc.during != nil {
				dra.SetBeforeCreate(s, func(created int) {
					if created == 2 {
						tc.during(s, stop)
					}
				})
			}
			s.Publish(three)
			select {
			case <-s.Started():
			case <-time.After(time.Minute):
				t.Fatal("the controller did not start")
			}
			waitForSlices(t, admin, node, tc.want)
			// The controller syncs a pool SliceSyncDelay after each event.
			time.Sleep(3 * dra.SliceSyncDelay)
			waitForSlices(t, admin, node, tc.want)
			if got := lists.get(); tc.lists && (len(got) < 2 || slices.Contains(got, "0")) {
				// The first is freshNode's, then the controller's.
				t.Errorf("the LISTs of the node's slices asked resourceVersions %q, want 2 or more, none \"0\"", got)
			}
			st := s.Stats()
			if s.Written() != tc.wantWritten || st.NumCreates != tc.wantCreates {
				t.Errorf("written first %d, by the controller %d; want %d, %d", s.Written(), st.NumCreates, tc.wantWritten, tc.wantCreates)
			}
		})
	}
}

// poolOf is pool p of n slices of one device each.
func poolOf(n int) resourceslice.DriverResources {
	var sl []resourceslice.Slice
	for i := range n {
		sl = append(sl, resourceslice.Slice{Devices: []resourceapi.Device{{Name: fmt.Sprintf("d%d-of-%d", i, n)}}})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"p": {Slices: sl}}}
}

func devicesOf(res resourceslice.DriverResources) [][]string {
	var out [][]string
	for _, s := range res.Pools["p"].Slices {
		var names []string
		for _, d := range s.Devices {
			names = append(names, d.Name)
		}
		out = append(out, names)
	}
	return out
}

func nodeSelector(node string) string {
	return fields.Set{resourceapi.ResourceSliceSelectorDriver: "cdi.local", resourceapi.ResourceSliceSelectorNodeName: node}.String()
}

// waitForSlices waits until the node's slices hold want, in the order
// of the index their names begin with.
func waitForSlices(t *testing.T, c kubernetes.Interface, node string, want [][]string) {
	t.Helper()
	var got [][]string
	err := kwait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: nodeSelector(node)})
		if err != nil {
			return false, err
		}
		slices.SortFunc(l.Items, func(a, b resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
		got = nil
		for _, s := range l.Items {
			var names []string
			for _, d := range s.Spec.Devices {
				names = append(names, d.Name)
			}
			got = append(got, names)
		}
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Fatalf("the node's slices hold %v, want %v", got, want)
	}
}

// setWatchList turns client-go's watch-list on or off until t ends.
func setWatchList(t *testing.T, on bool) {
	gates, ok := clientfeatures.FeatureGates().(interface {
		Set(clientfeatures.Feature, bool) error
	})
	if !ok {
		t.Fatal("client-go's feature gates cannot be set")
	}
	was := clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	if err := gates.Set(clientfeatures.WatchListClient, on); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gates.Set(clientfeatures.WatchListClient, was) })
}

// listVersions records the resourceVersion each LIST of ResourceSlices
// asked.
type listVersions struct {
	mu  sync.Mutex
	rvs []string
}

func (l *listVersions) add(r *http.Request) {
	q := r.URL.Query()
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/resourceslices") || q.Get("watch") == "true" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rvs = append(l.rvs, q.Get("resourceVersion"))
}

func (l *listVersions) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rvs)
}

// failingClient is a client of cfg whose nth POST of a ResourceSlice
// fails (never if n is 0): not sent, or if lose, sent and its answer
// lost. lists records its LISTs of ResourceSlices.
func failingClient(t *testing.T, cfg *rest.Config, n int, lose bool, lists *listVersions) kubernetes.Interface {
	cfg = rest.CopyConfig(cfg)
	var posts atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			lists.add(r)
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/resourceslices") && posts.Add(1) == int64(n) {
				if lose {
					if resp, err := rt.RoundTrip(r); err == nil {
						resp.Body.Close()
					}
				}
				return nil, errors.New("a create made to fail")
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestFirstSlicesUndoOnlyOwn: a first write that fails deletes the
// slices it created and the one whose create's answer was lost, never a
// slice of the node that another wrote meanwhile (another bridge's, of
// the same pool and index, or of another pool). The bridge stops at the
// failure, so that no controller starts after the undo.
func TestFirstSlicesUndoOnlyOwn(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// failCreate and lose are failingClient's.
		failCreate int
		lose       bool
		// others' slice, made before the third create: its pool and the
		// index its name begins with.
		pool, prefix string
	}{
		{name: "stopped half-way", pool: "q", prefix: "00000"},
		{name: "answer lost", failCreate: 3, lose: true, pool: "p", prefix: "00002"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := "undo-" + strings.ReplaceAll(tc.name, " ", "-")
			if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			var lists listVersions
			s := dra.StartNodeSlices(ctx, "cdi.local", node, failingClient(t, env.Config, tc.failCreate, tc.lose, &lists), func(_ context.Context, err error, msg string) {
				t.Logf("%s: %v", msg, err)
				if msg == "writing the first slices" {
					stop()
				}
			})
			defer s.Stop()
			others := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: tc.prefix + "-cdi.local-" + node + "-other"},
				Spec: resourceapi.ResourceSliceSpec{Driver: "cdi.local", NodeName: &node,
					Pool: resourceapi.ResourcePool{Name: tc.pool, Generation: 1, ResourceSliceCount: 3}, Devices: []resourceapi.Device{{Name: "theirs"}}}}
			dra.SetBeforeCreate(s, func(created int) {
				if created != 2 {
					return
				}
				if _, err := admin.ResourceV1().ResourceSlices().Create(context.Background(), others, metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
				if tc.failCreate == 0 {
					stop()
				}
			})
			s.Publish(poolOf(3))
			select {
			case <-s.Started():
			case <-time.After(time.Minute):
				t.Fatal("the first write did not end")
			}
			l, err := admin.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: nodeSelector(node)})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, sl := range l.Items {
				names = append(names, sl.Name)
			}
			if !slices.Equal(names, []string{others.Name}) {
				t.Errorf("the node's slices after the undo: %q, want only the other writer's %s", names, others.Name)
			}
		})
	}
}

package drafront

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// cameras is a pool of the endpoint plugin's shared cameras, and a
// device of the node's own, of one drop-in.
func cameras(devs ...spec.DeviceInfo) discovery.Pool {
	return discovery.Pool{Name: "camera-endpoint", Resource: "camera",
		Conf: &invoke.Conf{Path: "/etc/cdi/camera.d/endpoint.conf"}, Devices: devs}
}

// The store learns the healthy shared devices of the DRA pools a node
// sees, and nothing of its own devices; a pool gone, or with no camera
// left, takes the node out of its cameras' nodes.
func TestObserveShared(t *testing.T) {
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	f := &FrontEnd{node: "n1", store: store, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	gate := spec.DeviceInfo{ID: "gate", Resource: "camera", Shared: true, Healthy: true, Capacity: 2}
	dock := spec.DeviceInfo{ID: "dock", Resource: "camera", Shared: true, Healthy: false, Capacity: 2}
	own := spec.DeviceInfo{ID: "usb0", Resource: "camera", Healthy: true, Capacity: 1}
	ttys := discovery.Pool{Name: "tty-generic", Resource: "tty", Conf: &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf"},
		Devices: []spec.DeviceInfo{{ID: "tty1", Resource: "tty", Healthy: true, Capacity: 1}}}
	for _, tc := range []struct {
		name  string
		pools []discovery.Pool
		want  string // the nodes of each Instance, by device id
	}{
		{"the healthy cameras", []discovery.Pool{cameras(gate, dock, own), ttys}, "[gate:[n1]]"},
		{"a camera healthy again", []discovery.Pool{cameras(gate, healthy(dock), own), ttys}, "[dock:[n1] gate:[n1]]"},
		// The local store deletes an Instance no node sees, where the
		// Kubernetes store leaves that to the leader's prune.
		{"no healthy camera left", []discovery.Pool{cameras(dock, own), ttys}, "[]"},
		{"cameras back", []discovery.Pool{cameras(gate), ttys}, "[gate:[n1]]"},
		{"the pool gone", []discovery.Pool{ttys}, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.observeShared(ctx, tc.pools)
			all, err := store.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, in := range all {
				if !in.Shared || in.Config != "camera-endpoint" {
					t.Errorf("Instance %+v: only the shared cameras are recorded", in)
				}
				got = append(got, fmt.Sprintf("%s:%v", in.DeviceID, in.Nodes))
			}
			sort.Strings(got)
			if fmt.Sprint(got) != tc.want {
				t.Errorf("Instances %v, want %s", got, tc.want)
			}
		})
	}
}

func healthy(d spec.DeviceInfo) spec.DeviceInfo {
	d.Healthy = true
	return d
}

// The leader publishes nothing before its own discovery has named the
// DRA pools: a slice controller started with no pools would delete the
// slices the last leader left. Once the pools are known, it takes the
// slice over; when leadership ends, the slice stays. The API is a fake
// here; TestDRASharedCamera runs the same against a real one.
func TestLeadSharedWaitsForDiscovery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "left-by-the-last-leader"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "cdi.local", Pool: resourceapi.ResourcePool{Name: "camera-endpoint", Generation: 1, ResourceSliceCount: 1},
		PerDeviceNodeSelection: ptr.To(true),
		Devices:                []resourceapi.Device{{Name: "gate", NodeSelector: dradevices.NodesSelector([]string{"host-n0"})}},
	}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelHostname: "host-n1"}}}
	client := fake.NewClientset(left, node)
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	gate := spec.DeviceInfo{ID: "gate", Resource: "camera", Shared: true, Healthy: true, Capacity: 2}
	f := &FrontEnd{node: "n1", driver: "cdi.local", client: client, store: store, log: slog.New(slog.DiscardHandler),
		poolsChanged: make(chan struct{}, 1), sliceSyncDelay: ptr.To(100 * time.Millisecond)}
	f.observeShared(ctx, []discovery.Pool{cameras(gate)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.LeadShared(ctx, leaderStore{store})
	}()

	time.Sleep(3 * sharedMinGap)
	if got := sliceSelects(t, client); got != "[host-n0]" {
		t.Fatalf("before the first discovery the slice selects %s, want it as the last leader left it", got)
	}
	f.mu.Lock()
	f.pools = []discovery.Pool{cameras(gate)}
	f.mu.Unlock()
	tell(f.poolsChanged)
	err := kwait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return sliceSelects(t, client) == "[host-n1]", nil
	})
	if err != nil {
		t.Fatalf("after the discovery the slice selects %s, want n1's hostname", sliceSelects(t, client))
	}
	cancel()
	<-done
	if got := sliceSelects(t, client); got != "[host-n1]" {
		t.Errorf("after leadership ended the slice selects %s", got)
	}
}

// sliceSelects is what the node selector of the one device of the one
// slice of the fake API selects.
func sliceSelects(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	l, err := client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || len(l.Items[0].Spec.Devices) != 1 {
		return fmt.Sprintf("slices %+v", l.Items)
	}
	return schedtest.Selects(l.Items[0].Spec.Devices[0])
}

// leaderStore is a local store as the leader's departed.Store: leadShared
// reads its List and Changes only.
type leaderStore struct{ *local.Store }

func (leaderStore) ForgetNode(context.Context, string) (int, error) { return 0, nil }

func (leaderStore) Nodes(context.Context) ([]string, error) { return nil, nil }

func (leaderStore) PruneUnseen(context.Context, time.Duration, time.Time) (int, error) { return 0, nil }

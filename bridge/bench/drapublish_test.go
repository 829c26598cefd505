package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// draDriver is the driver name the slices are published under: the
// bridge's default --domain.
const draDriver = "cdi.local"

// errNotMinimal is returned when the floor is asked for a change it does
// not make in place.
var errNotMinimal = errors.New("the floor changes devices in place only")

// publisher is one subject of the DRA table: it publishes a node's
// discovery, first whole, then again after each change.
type publisher interface {
	// publish hands pools to the API, the first time or again, and
	// returns the slices the API must then hold.
	publish(ctx context.Context, pools []discovery.Pool) ([]resourceslice.Slice, error)
	stop() error
}

// countedClient is a client with the bridge's own settings (its rate
// limit, JSON) whose requests c counts.
func countedClient(cfg *rest.Config, agent string, c *requestCounter) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = kube.ClientQPS, kube.ClientBurst // as cdi-bridge sets its client's
	cfg.UserAgent = agent
	cfg.Wrap(c.wrap)
	return kubernetes.NewForConfig(cfg)
}

// libraryPublisher is the bridge's controller alone: the library's
// ResourceSlice controller with a Node owner (dra.StartNodeSlices),
// started just before the first publish, which, as each later one, is an
// Update of it. Its node is fresh: the first slices are created ahead of
// the controller's start, which adopts them; its first publish is that,
// without the bridge's start around it (BenchmarkDRAStart has that).
type libraryPublisher struct {
	node    string
	slices  *dra.NodeSlices
	started time.Time // when the front end started the controller
	first   time.Time // the first publish

	mu   sync.Mutex
	errs []error // the controller's, through its ErrorHandler
}

// startLibraryPublisher starts node's controller, running until stop, as
// the bridge's front end starts it; ctx is the whole run's.
func startLibraryPublisher(ctx context.Context, client kubernetes.Interface, node string) *libraryPublisher {
	l := &libraryPublisher{node: node, started: time.Now()}
	l.slices = dra.StartNodeSlices(ctx, draDriver, node, client, l.handleError)
	return l
}

func (l *libraryPublisher) publish(_ context.Context, pools []discovery.Pool) ([]resourceslice.Slice, error) {
	if l.first.IsZero() {
		l.first = time.Now()
	}
	res := dradevices.Resources(draDriver, l.node, pools, nil)
	l.slices.Publish(res)
	return res.Pools[dradevices.PoolName(l.node, draPool)].Slices, nil
}

func (l *libraryPublisher) handleError(_ context.Context, err error, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Errorf("%s: %w", msg, err))
}

// stop stops the controller and returns what it reported: a publish the
// controller had to retry, or whose fields the API dropped, is not the
// publish measured.
func (l *libraryPublisher) stop() error {
	l.slices.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// stats are the controller's own counts of its writes.
func (l *libraryPublisher) stats() resourceslice.Stats { return l.slices.Stats() }

// floorPublisher writes the same slices with the typed client and
// nothing else: a create for each slice, named and owned as the library
// names and owns them; then, for a change, an update of each slice that
// holds a changed device, in place (a device gone leaves its slice
// shorter, the others as they were).
type floorPublisher struct {
	client kubernetes.Interface
	node   *corev1.Node
	pool   string                       // the discovery's pool; draPool when empty
	stored []*resourceapi.ResourceSlice // as the API returned them
}

// poolName is the name of the floor's pool in its slices, as the
// bridge's dradevices.PoolName names it.
func (f *floorPublisher) poolName() string {
	if f.pool == "" {
		return dradevices.PoolName(f.node.Name, draPool)
	}
	return dradevices.PoolName(f.node.Name, f.pool)
}

func (f *floorPublisher) publish(ctx context.Context, pools []discovery.Pool) ([]resourceslice.Slice, error) {
	desired := dradevices.Resources(draDriver, f.node.Name, pools, nil).Pools[f.poolName()].Slices
	if f.stored == nil {
		return desired, f.create(ctx, desired)
	}
	devices := map[string]resourceapi.Device{}
	for _, s := range desired {
		for _, d := range s.Devices {
			devices[d.Name] = d
		}
	}
	want := make([]resourceslice.Slice, len(f.stored))
	for i, s := range f.stored {
		changed, kept := false, make([]resourceapi.Device, 0, len(s.Spec.Devices))
		for _, d := range s.Spec.Devices {
			now, ok := devices[d.Name]
			delete(devices, d.Name)
			changed = changed || !ok || !resourceslice.DevicesDeepEqual([]resourceapi.Device{d}, []resourceapi.Device{now})
			if ok {
				kept = append(kept, now)
			}
		}
		want[i] = resourceslice.Slice{Devices: kept}
		if changed {
			if err := f.update(ctx, i, kept); err != nil {
				return nil, err
			}
		}
	}
	if len(devices) > 0 {
		return nil, fmt.Errorf("%w: %d devices are new", errNotMinimal, len(devices))
	}
	return want, nil
}

// create writes the slices, one create each, in order.
func (f *floorPublisher) create(ctx context.Context, desired []resourceslice.Slice) error {
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: f.node.Name, UID: f.node.UID, Controller: ptr.To(true)}
	// The library's index prefix: hexadecimal, at least 5 digits.
	width := max(5, len(fmt.Sprintf("%x", max(len(desired)-1, 0))))
	for i, s := range desired {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName:    fmt.Sprintf("%0*x-%s-%s-", width, i, draDriver, f.node.Name),
				OwnerReferences: []metav1.OwnerReference{owner},
			},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   draDriver,
				Pool:     resourceapi.ResourcePool{Name: f.poolName(), Generation: 1, ResourceSliceCount: int64(len(desired))},
				NodeName: ptr.To(f.node.Name),
				Devices:  s.Devices,
			},
		}
		got, err := f.client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating slice %d: %w", i, err)
		}
		f.stored = append(f.stored, got)
	}
	return nil
}

// update writes slice i with devices, guarded by the resourceVersion the
// API returned last.
func (f *floorPublisher) update(ctx context.Context, i int, devices []resourceapi.Device) error {
	slice := f.stored[i].DeepCopy()
	slice.Spec.Devices = devices
	got, err := f.client.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating slice %d: %w", i, err)
	}
	f.stored[i] = got
	return nil
}

func (f *floorPublisher) stop() error { return nil }

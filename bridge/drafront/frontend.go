package drafront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
)

// Config is what Start needs.
type Config struct {
	// NodeName is this node.
	NodeName string
	// Driver is the DRA driver's name (the bridge's --domain), also the
	// vendor of the claims' CDI names.
	Driver string
	Client kubernetes.Interface
	// CDI is the directory of the claims' CDI spec files.
	CDI *cdispec.Dir
	// Checkpoint is the file recording the prepared claims.
	Checkpoint string
	// PluginDir and RegistrarDir are dra.Config's.
	PluginDir, RegistrarDir string
	// Store is the node's Instance store, told which shared devices the
	// node sees.
	Store  instance.Store
	Logger *slog.Logger
	// OnFatal is dra.Config's: told of an error the kubelet plugin
	// cannot recover from.
	OnFatal func(error)
	// PodUID is dra.Config's: set, the driver serves beside the other
	// pod of a rolling update, with which the preparer shares the
	// checkpoint (dradevices.Preparer.PluginDir).
	PodUID types.UID
}

// ErrConfig is wrapped by Start's error for a Config that lacks a field.
var ErrConfig = errors.New("DRA front end configuration")

// FrontEnd serves the pools SetPools hands it through DRA: the node's own
// devices in its slices, the shared devices through the Instance store,
// from which the elected bridge publishes them (LeadShared).
type FrontEnd struct {
	node      string
	driver    string
	client    kubernetes.Interface
	preparer  *dradevices.Preparer
	publisher dra.Publisher
	getClaim  dradevices.GetClaim
	// registered is nil once the kubelet has registered the driver.
	registered func() error
	store      instance.Store
	log        *slog.Logger

	// pending is the newest discovery not yet handed to the publisher;
	// wake is told when pending is set. pools is the newest DRA pools,
	// nil before the first discovery; poolsChanged is told when they
	// are set.
	mu           sync.Mutex
	pending      *update
	wake         chan struct{}
	pools        []discovery.Pool
	poolsChanged chan struct{}

	// observed is the pools of which the store was last told shared
	// devices are seen; the publishing goroutine's alone.
	observed map[string]bool
	// sliceSyncDelay is the shared slices' controller's wait after a
	// slice event before it syncs the pool; nil is the library's default
	// (30 s). Tests shorten it.
	sliceSyncDelay *time.Duration
}

// update is a discovery's DRA pools and the node's slices of them.
type update struct {
	pools []discovery.Pool
	res   resourceslice.DriverResources
}

// Start loads the checkpoint, rewrites the CDI specs of the claims it
// holds as prepared, starts the kubelet plugin and the goroutine that
// publishes the node's slices, and returns; they stop when ctx ends.
func Start(ctx context.Context, cfg Config) (*FrontEnd, error) {
	if cfg.NodeName == "" || cfg.Driver == "" || cfg.Client == nil || cfg.CDI == nil || cfg.Store == nil {
		return nil, fmt.Errorf("%w: node name, driver, client, CDI directory and store are all needed", ErrConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ckpt, err := dradevices.LoadCheckpoint(cfg.Checkpoint)
	if err != nil {
		return nil, err
	}
	p := &dradevices.Preparer{Driver: cfg.Driver, Node: cfg.NodeName, CDI: cfg.CDI, Vendor: cfg.Driver, Checkpoint: ckpt, Logger: log}
	if cfg.PodUID != "" {
		p.PluginDir = dra.PluginDir(cfg.PluginDir, cfg.Driver)
	}
	if err := p.RestoreSpecs(); err != nil {
		log.Error("rewriting the CDI specs of prepared claims", "error", err)
	}
	d, err := dra.Start(ctx, dra.Config{DriverName: cfg.Driver, NodeName: cfg.NodeName, Client: cfg.Client, Devices: p,
		PluginDir: cfg.PluginDir, RegistrarDir: cfg.RegistrarDir, Logger: log, OnFatal: cfg.OnFatal, PodUID: cfg.PodUID})
	if err != nil {
		return nil, err
	}
	log.Info("DRA front end", "driver", cfg.Driver, "checkpoint", cfg.Checkpoint, "prepared", len(ckpt.UIDs()))
	client := cfg.Client
	getClaim := func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
		return client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	f := &FrontEnd{node: cfg.NodeName, driver: cfg.Driver, client: client, preparer: p, publisher: d,
		getClaim: getClaim, store: cfg.Store, registered: d.Registered, log: log, wake: make(chan struct{}, 1),
		poolsChanged: make(chan struct{}, 1)}
	go f.publish(ctx)
	return f, nil
}

// Registered is nil once the kubelet has registered the driver.
func (f *FrontEnd) Registered() error { return f.registered() }

// SetPools hands over a discovery's pools served through DRA (Split):
// the preparer serves them at once, the publishing goroutine publishes
// them.
func (f *FrontEnd) SetPools(pools []discovery.Pool) {
	f.preparer.SetPools(pools)
	if pools == nil {
		pools = []discovery.Pool{} // discovered: none
	}
	f.mu.Lock()
	f.pending = &update{pools: pools, res: dradevices.Resources(f.node, pools)}
	f.pools = pools
	f.mu.Unlock()
	tell(f.wake)
	tell(f.poolsChanged)
}

// tell sends on ch, a channel of one buffered signal, unless a signal
// waits already.
func tell(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// publish hands the newest slices to the publisher until ctx ends. It is
// a goroutine of its own because the library's first publish waits for
// its informer of the node's slices, which waits for the API server (for
// ever, while RBAC forbids the list): the device plugins' pools, which
// discovery hands on in the same call, must not wait with it.
//
// With the first discovery's pools set, it also starts the release of
// the checkpoint's claims that are gone (dradevices.Preparer.ReleaseGone).
// Before each publish it tells the store which shared devices the node
// sees (observeShared).
func (f *FrontEnd) publish(ctx context.Context) {
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
		f.mu.Lock()
		res := f.pending
		f.pending = nil
		f.mu.Unlock()
		if res == nil {
			continue
		}
		if first {
			first = false
			go func() {
				if err := f.preparer.ReleaseGone(ctx, f.getClaim); err != nil {
					f.log.Error("releasing the claims gone while the bridge was down; the kubelet's unprepare or the next start will", "error", err)
				}
			}()
		}
		f.observeShared(ctx, res.pools)
		if err := f.publisher.PublishResources(ctx, res.res); err != nil {
			f.log.Error("publishing ResourceSlices", "error", err)
		}
	}
}

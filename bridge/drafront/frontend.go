package drafront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
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
	Store instance.Store
	// Kubelet is the kubelet's PodResources API, which says what its
	// containers hold; nil where it cannot be asked, and then nothing is
	// released but by the kubelet's Unprepare.
	Kubelet reclaim.Lister
	// Grace is how long an allocation of the device plugins in a DRA
	// drop-in is kept once no container holds it; SweepPeriod how often
	// that is looked at (30 s when 0).
	Grace, SweepPeriod time.Duration
	// BootID is the kernel's boot id; nil reads it
	// (dradevices.BootID).
	BootID func() string
	// OnSetAside, if set, is told of a checkpoint set aside, by reason
	// (dradevices.ReasonUnreadable, ReasonPreviousBoot): at start, or,
	// with a pod UID, by a call that reads it anew and cannot.
	OnSetAside func(reason string)
	Logger     *slog.Logger
	// OnFatal is dra.Config's: told of an error the kubelet plugin
	// cannot recover from.
	OnFatal func(error)
	// PodUID is dra.Config's: set, the driver serves beside the other
	// pod of a rolling update, with which the preparer shares the
	// checkpoint (dradevices.Preparer.PluginDir).
	PodUID types.UID
	// OnClaim, if set, is told of every Prepare and Unprepare
	// (dradevices.Observed).
	OnClaim func(op, pool, reason string, took time.Duration)
	// Slices is the controller of the node's slices, started as early
	// as the caller could (StartSlices); nil: Start starts it.
	Slices *dra.NodeSlices
}

// ErrConfig is wrapped by Start's error for a Config that lacks a field.
var ErrConfig = errors.New("DRA front end configuration")

// FrontEnd serves the pools SetPools hands it through DRA: the node's own
// devices in its slices, the shared devices through the Instance store,
// from which the elected bridge publishes them (SharedJob).
type FrontEnd struct {
	cfg      Config
	node     string
	driver   string
	client   kubernetes.Interface
	preparer *dradevices.Preparer
	store    instance.Store
	log      *slog.Logger
	// aside is the checkpoint Start set aside, nil if none.
	aside *dradevices.SetAside
	// slices is the controller of the node's slices (Config.Slices),
	// started before the front end so that its start (a second:
	// dra.NodeSlices) runs beside the Instance store's first sync, the
	// first discovery and the rebuild.
	slices *dra.NodeSlices

	// pools is the newest DRA pools, nil before the first discovery,
	// and discovered when they were set; wake, observeWake and
	// poolsChanged are told when they are set. publisher is the kubelet
	// plugin, nil until it started (after Rebuild). published counts the
	// devices of each pool last handed to it.
	mu           sync.Mutex
	pools        []discovery.Pool
	discovered   time.Time
	wake         chan struct{}
	observeWake  chan struct{}
	poolsChanged chan struct{}
	publisher    dra.Publisher
	registered   func() error
	published    []metrics.DRAPool

	// observed is the pools of which the store was last told shared
	// devices are seen; the observing goroutine's alone (observe).
	observed map[string]bool
	// rebuilt is the pools whose claims were last rebuilt (run, then
	// publish); the publishing goroutine's alone.
	rebuilt map[string]bool
	// sliceSyncDelay is the shared slices' controller's wait after a
	// slice event before it syncs the pool; nil is the library's default
	// (30 s). Tests shorten it.
	sliceSyncDelay *time.Duration
}

// Start opens the checkpoint (setting aside one that cannot be read or
// that a previous boot wrote: dradevices.OpenCheckpoint), rewrites the CDI
// specs of the claims it holds as prepared, and starts the goroutine that,
// once the first discovery has set the pools, rebuilds the prepared
// claims from the API server and the plugins (dradevices.Preparer.Rebuild),
// then registers the driver with the kubelet and publishes the node's
// slices. They stop when ctx ends. Its error is for a Config that lacks a
// field and a checkpoint that cannot even be moved aside.
//
// With a pod UID, the checkpoint is opened under the library's lock of
// the calls, which the other bridge of a rolling update holds while it
// writes the file: a file it has just written is never judged, or moved
// aside, as the one before it.
func Start(ctx context.Context, cfg Config) (*FrontEnd, error) {
	if cfg.NodeName == "" || cfg.Driver == "" || cfg.Client == nil || cfg.CDI == nil || cfg.Store == nil {
		return nil, fmt.Errorf("%w: node name, driver, client, CDI directory and store are all needed", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BootID == nil {
		cfg.BootID = dradevices.BootID
	}
	p, aside, err := openPreparer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("DRA front end", "driver", cfg.Driver, "checkpoint", cfg.Checkpoint, "prepared", len(p.Checkpoint.UIDs()))
	f := &FrontEnd{cfg: cfg, node: cfg.NodeName, driver: cfg.Driver, client: cfg.Client, preparer: p, store: cfg.Store,
		log: cfg.Logger, aside: aside, wake: make(chan struct{}, 1), observeWake: make(chan struct{}, 1),
		poolsChanged: make(chan struct{}, 1), slices: cfg.Slices}
	p.OnSetAside = func(a dradevices.SetAside) { go f.warnSetAside(ctx, a, setAsideInCall) }
	if f.slices == nil {
		f.slices = StartSlices(ctx, cfg.Driver, cfg.NodeName, cfg.Client, cfg.Logger)
	}
	go f.run(ctx)
	return f, nil
}

// StartSlices starts the controller of node's slices of driver
// (dra.StartNodeSlices) until ctx ends, logging its errors, all of which
// it retries, and when its start returned. The bridge starts it as soon
// as it knows the client, the driver and the node, and hands it to Start
// (Config.Slices): the library's start takes a second whatever it waits
// for (dra.NodeSlices), which then passes during the Instance store's
// first sync, the first discovery and the rebuild of the prepared
// claims; on a node with none of the driver's slices, the first are
// written without it and it starts after them. It publishes nothing
// before the front end's first publish, and with dra.AfterLock nothing
// before the bridge holds the node's lock.
func StartSlices(ctx context.Context, driver, node string, client kubernetes.Interface, log *slog.Logger,
	options ...dra.SlicesOption) *dra.NodeSlices {
	s := dra.StartNodeSlices(ctx, driver, node, client, func(_ context.Context, err error, msg string) {
		log.Error("publishing the node's ResourceSlices: "+msg, "error", err)
	}, options...)
	go func() {
		<-s.Started()
		if ctx.Err() == nil {
			// writtenAhead: the first slices, written before it started
			// on a node that had none (0: it writes them).
			log.Info("the slice controller started", "took", time.Since(s.Begun()), "writtenAhead", s.Written())
		}
	}()
	return s
}

// openPreparer is the Preparer over the checkpoint as Start opens it,
// the CDI specs of its prepared claims rewritten, and the checkpoint set
// aside; with a pod UID, under the library's lock of the calls.
func openPreparer(ctx context.Context, cfg Config) (*dradevices.Preparer, *dradevices.SetAside, error) {
	var pluginDir string
	if cfg.PodUID != "" {
		pluginDir = dra.PluginDir(cfg.PluginDir, cfg.Driver)
		unlock, err := dra.LockCalls(ctx, pluginDir)
		if err != nil {
			return nil, nil, err
		}
		defer unlock()
	}
	ckpt, aside, err := dradevices.OpenCheckpoint(cfg.Checkpoint, cfg.BootID(), time.Now())
	if err != nil {
		return nil, nil, err
	}
	p := &dradevices.Preparer{Driver: cfg.Driver, Node: cfg.NodeName, CDI: cfg.CDI, Vendor: cfg.Driver, Checkpoint: ckpt,
		Logger: cfg.Logger, Grace: cfg.Grace, PluginDir: pluginDir}
	if err := p.RestoreSpecs(); err != nil {
		cfg.Logger.Error("rewriting the CDI specs of prepared claims", "error", err)
	}
	return p, aside, nil
}

// Holds says whether a prepared claim holds pool's device dev
// (dradevices.Preparer.Holds): discovery keeps such a device when it
// vanishes.
func (f *FrontEnd) Holds(pool string, dev spec.DeviceInfo) bool { return f.preparer.Holds(pool, dev) }

// Registered is nil once the kubelet has registered the driver, which it
// is asked to only once the prepared claims are rebuilt.
func (f *FrontEnd) Registered() error {
	f.mu.Lock()
	registered := f.registered
	f.mu.Unlock()
	if registered == nil {
		return fmt.Errorf("%w: the prepared claims are not yet rebuilt from the API server and the plugins", dra.ErrNotRegistered)
	}
	return registered()
}

// SetPools hands over a discovery's pools served through DRA (Split):
// the preparer serves them at once, the kubelet is told their devices'
// health at once (once its plugin started), the publishing goroutine
// publishes them and the observing one tells the store of their shared
// devices.
func (f *FrontEnd) SetPools(pools []discovery.Pool) {
	f.preparer.SetPools(pools)
	if pools == nil {
		pools = []discovery.Pool{} // discovered: none
	}
	for _, p := range pools {
		if _, err := dradevices.DropInSettings(p.Conf); err != nil {
			f.log.Error("serving the drop-in with the default DRA settings", "pool", p.Name, "error", err)
		}
	}
	f.mu.Lock()
	if f.pools == nil {
		f.log.Info("the first discovery's DRA pools", "pools", len(pools), "devices", countDevices(pools),
			"sinceSliceControllerStart", time.Since(f.slices.Begun()))
	}
	f.pools, f.discovered = pools, time.Now()
	f.reportHealth()
	f.mu.Unlock()
	tell(f.wake)
	tell(f.observeWake)
	tell(f.poolsChanged)
}

// reportHealth tells the kubelet plugin the health of the newest pools'
// devices, unless it has not started. Called with f.mu held, so that
// two reports never overtake each other.
func (f *FrontEnd) reportHealth() {
	if f.publisher != nil && f.pools != nil {
		f.publisher.ReportHealth(f.preparer.Health(f.pools, f.discovered))
	}
}

// Published counts the devices of each DRA pool in the node's slices as
// last handed to the publisher, and those of them tainted: what
// cdi_bridge_dra_devices reads.
func (f *FrontEnd) Published() []metrics.DRAPool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.published
}

// tell sends on ch, a channel of one buffered signal, unless a signal
// waits already.
func tell(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run is the front end's goroutine: it waits for the first discovery,
// starts telling the store of the shared devices (observe), rebuilds the
// prepared claims, starts the kubelet plugin, then publishes (publish)
// until ctx ends.
func (f *FrontEnd) run(ctx context.Context) {
	if f.aside != nil {
		f.warnSetAside(ctx, *f.aside, setAsideAtStart)
	}
	select {
	case <-ctx.Done():
		return
	case <-f.wake:
	}
	tell(f.wake) // the first pools, to publish
	go f.observe(ctx)
	f.servedAnew(f.currentPools())
	if !f.rebuild(ctx) {
		return
	}
	var devices dra.Devices = f.preparer
	if f.cfg.OnClaim != nil {
		devices = dradevices.Observed(f.preparer, f.cfg.OnClaim)
	}
	d, err := dra.Start(ctx, dra.Config{DriverName: f.driver, NodeName: f.node, Client: f.client, Devices: devices,
		Slices: f.slices, PluginDir: f.cfg.PluginDir, RegistrarDir: f.cfg.RegistrarDir, Logger: f.log, OnFatal: f.cfg.OnFatal,
		PodUID: f.cfg.PodUID})
	if err != nil {
		f.log.Error("starting the DRA kubelet plugin", "error", err)
		if f.cfg.OnFatal != nil {
			f.cfg.OnFatal(err)
		}
		return
	}
	f.mu.Lock()
	f.publisher, f.registered = d, d.Registered
	f.reportHealth()
	f.mu.Unlock()
	f.log.Info("the first discovery's DRA pools handed to the slice controller", "sinceSliceControllerStart", time.Since(f.slices.Begun()))
	f.publish(ctx)
}

// observeRetry is how long after a failed Observe the shared devices'
// sightings are recorded again, if no discovery comes first.
const observeRetry = 5 * time.Second

// observe tells the store which shared devices the node sees
// (observeShared) at each discovery from the first, and again
// observeRetry after a try that failed, until ctx ends. It runs beside
// the rebuild and the publishing: the node's slices hold none of the
// shared devices, which the elected bridge publishes from the store, so
// they do not wait for its writes (the first takes 0.2 s for a pool of
// 1,000 devices), nor do its writes wait for the rebuild.
func (f *FrontEnd) observe(ctx context.Context) {
	var retry <-chan time.Time
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-retry:
		case <-f.observeWake:
		}
		observing := time.Now()
		retry = f.observeAgain(ctx, f.currentPools())
		if first {
			f.log.Info("the first discovery's DRA pools recorded in the Instance store", "took", time.Since(observing))
		}
	}
}

// publish hands the newest slices to the publisher until ctx ends: at
// each discovery, and after each sweep that changed what the device
// plugins' allocations hold (Sweep). When a pool is served that was not
// at the last rebuild (a drop-in added, or one whose INFO failed at the
// first discovery), the claims are rebuilt first: one prepared with its
// devices before the bridge started is prepared again (the plugin may
// have lost it, or the checkpoint), and one gone meanwhile, whose
// Unprepare could not DEL, is released.
//
// It runs in a goroutine of its own because the rebuild before it waits
// for the API server: the device plugins' pools, which discovery hands
// on in the same call, must not wait with it.
func (f *FrontEnd) publish(ctx context.Context) {
	sweep := time.NewTicker(orDefault(f.cfg.SweepPeriod, 30*time.Second))
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			if !f.sweep(ctx) {
				continue
			}
		case <-f.wake:
		}
		pools := f.currentPools()
		if anew := f.servedAnew(pools); len(anew) > 0 {
			f.log.Info("DRA pools served anew; rebuilding the prepared claims", "pools", anew)
			if !f.rebuild(ctx) {
				return
			}
		}
		f.keepSlotSpecs(pools)
		res := dradevices.Resources(f.driver, f.node, pools, f.preparer.Withheld())
		counts := publishedCounts(f.node, pools, res)
		f.mu.Lock()
		f.published = counts
		f.mu.Unlock()
		if err := f.publisher.PublishResources(ctx, res); err != nil {
			f.log.Error("publishing ResourceSlices", "error", err)
		}
	}
}

// keepSlotSpecs keeps the CDI spec files of the pools, of pools, in which
// device plugins' slots are kept (dradevices.Preparer.SlotPools): a
// pool moved to DRA under running pods, whose containers' Allocate
// answers name its devices by CDI, and which the device plugins' node
// no longer writes.
func (f *FrontEnd) keepSlotSpecs(pools []discovery.Pool) {
	if f.cfg.CDI == nil { // a front end of tests that write no spec
		return
	}
	held := f.preparer.SlotPools()
	var kinds []cdispec.Kind
	for _, p := range pools {
		if held[p.Name] {
			kinds = append(kinds, cdispec.PoolKind(f.driver, p.Name, p.Devices))
		}
	}
	if err := f.cfg.CDI.Keep(kinds); err != nil {
		f.log.Error("keeping the CDI spec files of pools moved to DRA whose containers hold slots of the device plugins", "error", err)
	}
}

// servedAnew records pools as those rebuilt, and says which of them
// were not at the last call (none at the first).
func (f *FrontEnd) servedAnew(pools []discovery.Pool) []string {
	var anew []string
	names := map[string]bool{}
	for _, p := range pools {
		names[p.Name] = true
		if f.rebuilt != nil && !f.rebuilt[p.Name] {
			anew = append(anew, p.Name)
		}
	}
	f.rebuilt = names
	return anew
}

// publishedCounts counts the devices of each of pools in res, and those
// of them tainted.
func publishedCounts(node string, pools []discovery.Pool, res resourceslice.DriverResources) []metrics.DRAPool {
	out := make([]metrics.DRAPool, 0, len(pools))
	for _, p := range pools {
		c := metrics.DRAPool{Pool: p.Name}
		for _, s := range res.Pools[dradevices.PoolName(node, p.Name)].Slices {
			for _, d := range s.Devices {
				c.Published++
				if len(d.Taints) > 0 {
					c.Tainted++
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// countDevices counts the devices of pools.
func countDevices(pools []discovery.Pool) int {
	n := 0
	for _, p := range pools {
		n += len(p.Devices)
	}
	return n
}

func (f *FrontEnd) currentPools() []discovery.Pool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pools
}

// observeAgain is observeShared, and a timer for the next try when it
// failed, else nil.
func (f *FrontEnd) observeAgain(ctx context.Context, pools []discovery.Pool) <-chan time.Time {
	if f.observeShared(ctx, pools) {
		return time.After(observeRetry)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

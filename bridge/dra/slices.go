package dra

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// How the node's ResourceSlices are kept. The kubelet deletes every
// ResourceSlice of its node when it starts (Kubernetes 1.36: no driver
// has registered yet); the library's defaults then publish them again
// 30 s after the deletion (its sync delay), or a minute after they were
// created if that is later (its mutation cache keeps a slice it created
// for a minute and takes it for still there). A node then offers nothing
// to the scheduler for that long after every kubelet restart. Here a
// deleted slice is written again SliceSyncDelay after the deletion is
// seen. The cache is what keeps a second slice from being created while
// the informer has not yet seen the first; the API server's watch
// delivers a node's few slices in well under its TTL.
const (
	SliceSyncDelay = time.Second
	SliceCacheTTL  = 5 * time.Second
)

// NodeSliceOptions are the options of the controller that publishes
// node's slices res of driver: the Node its owner, as
// kubeletplugin.Helper has it, with SliceSyncDelay and SliceCacheTTL.
// onError is told of every error, all of which it retries.
func NodeSliceOptions(driver, node string, client kubernetes.Interface, res *resourceslice.DriverResources,
	onError func(context.Context, error, string)) resourceslice.Options {
	return resourceslice.Options{
		DriverName: driver, KubeClient: client, Resources: res,
		Owner:     &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
		SyncDelay: ptr.To(SliceSyncDelay), MutationCacheTTL: ptr.To(SliceCacheTTL), ErrorHandler: onError,
	}
}

// NodeSlices publishes a node's ResourceSlices with the library's
// controller (NodeSliceOptions), started as soon as NodeSlices is, long
// before the first discovery is known: resourceslice.StartController
// returns only once its informer of the node's slices has synced, which
// it checks once a second (initInformer in
// k8s.io/dynamic-resource-allocation/resourceslice, v0.37.2; no option
// changes it), so a controller started at the first publish, as
// kubeletplugin.Helper.PublishResources starts it, delays every node's
// first slices by a second. Started early (cdi-bridge starts it right
// after its client configuration is resolved), that second passes while
// discovery runs its plugins, the Instance store follows the pools and
// the prepared claims are rebuilt; what of it is left when those are
// done, the first slices still wait (bridge/SCALING.md has the figures).
//
// Until the first Publish the controller's work queue holds back its
// worker (gatedQueue): a controller that synced with no pools would
// delete every slice of the node, those a restarted bridge keeps.
//
// On a node with none of the driver's slices (a new node, or after a
// reboot) the controller is not needed for the first slices: they are
// created as it would create them, at the first Publish, and the
// controller is started afterwards and adopts them (firstslices.go).
//
// Two bridges of one node (the old and the new pod of a rolling update
// with maxSurge) must not both write its slices: each would write its
// own view over the other's for as long as both run, and on a fresh node
// both would write a first set. With AfterLock, nothing is written (no
// LIST of a fresh node, no first slices, no controller) until the
// bridge holds the node's lock (bridge/internal/handover), which the
// other lets go only once its controller has stopped (Stop).
type NodeSlices struct {
	begun   time.Time // when StartNodeSlices was called
	queue   *gatedQueue
	cancel  context.CancelFunc
	started chan struct{} // closed once StartController returned
	// held, if set (AfterLock), is closed once this bridge holds the
	// node's lock: start waits for it.
	held <-chan struct{}

	// For writeFirst: first is closed by the first Publish.
	first        chan struct{}
	firstOnce    sync.Once
	driver, node string
	client       kubernetes.Interface
	onError      func(context.Context, error, string)
	// beforeCreate, if set (tests), is called before each create of
	// writeFirst with the count created so far.
	beforeCreate func(created int)

	mu sync.Mutex
	// ctrl is nil until StartController returned; pending is the newest
	// Publish before that.
	ctrl    *resourceslice.Controller
	pending *resourceslice.DriverResources

	written int // by writeFirst, before started is closed
}

// A SlicesOption changes how StartNodeSlices starts.
type SlicesOption func(*NodeSlices)

// AfterLock makes NodeSlices wait until held is closed, once this bridge
// holds the node's lock (handover.Lock.Held), before it looks at the
// node's slices, writes the first ones or starts the controller. Publish
// meanwhile keeps the newest slices for then. A nil held waits for
// nothing.
func AfterLock(held <-chan struct{}) SlicesOption {
	return func(s *NodeSlices) { s.held = held }
}

// StartNodeSlices starts the controller of node's slices of driver in the
// background, until ctx ends or Stop; onError is NodeSliceOptions'.
// On a node with none of driver's slices (freshNode) the first Publish's
// slices are written first (writeFirst) and the controller starts after.
func StartNodeSlices(ctx context.Context, driver, node string, client kubernetes.Interface,
	onError func(context.Context, error, string), options ...SlicesOption) *NodeSlices {
	ctx, cancel := context.WithCancel(ctx)
	s := &NodeSlices{begun: time.Now(), queue: newGatedQueue(), cancel: cancel, started: make(chan struct{}),
		first: make(chan struct{}), driver: driver, node: node, client: client, onError: onError}
	for _, o := range options {
		o(s)
	}
	opts := NodeSliceOptions(driver, node, client, nil, onError)
	opts.Queue = s.queue
	go s.start(ctx, opts)
	return s
}

// start starts the controller, after writeFirst on a fresh node: the
// controller's informer then lists the slices written, and its worker,
// which the first Publish lets go once StartController returned (its
// informer synced), finds them in its store and matches them by their
// names' index: it writes nothing and never a second set.
func (s *NodeSlices) start(ctx context.Context, opts resourceslice.Options) {
	defer close(s.started)
	if s.held != nil {
		select {
		case <-ctx.Done():
			return
		case <-s.held:
		}
	}
	if owner, fresh := s.freshNode(ctx); fresh {
		select {
		case <-ctx.Done():
			return
		case <-s.first:
		}
		s.writeFirst(ctx, owner)
		opts.KubeClient = consistentLists{opts.KubeClient}
	}
	// Its only error is ctx's end: driver, node and client are set.
	c, err := resourceslice.StartController(ctx, opts)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctrl = c
	if s.pending != nil {
		c.Update(s.pending)
		s.queue.open()
	}
}

// Publish hands the node's slices res to the controller, which writes
// them in the background; before the controller has started they wait
// for it.
func (s *NodeSlices) Publish(res resourceslice.DriverResources) {
	r := &resourceslice.DriverResources{Pools: res.Pools}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.firstOnce.Do(func() { close(s.first) })
	if s.ctrl == nil {
		s.pending = r
		return
	}
	s.ctrl.Update(r)
	s.queue.open()
}

// Begun is when StartNodeSlices started the controller; the zero time
// for a nil NodeSlices.
func (s *NodeSlices) Begun() time.Time {
	if s == nil {
		return time.Time{}
	}
	return s.begun
}

// Started is closed once the controller has started (or ctx ended
// first); with AfterLock, not before the lock is held.
func (s *NodeSlices) Started() <-chan struct{} { return s.started }

// Written is how many slices writeFirst created and kept: 0 unless
// the node had none at the start. Valid once Started is closed.
func (s *NodeSlices) Written() int { return s.written }

// Stats are the controller's counts of its writes; zero before it
// started.
func (s *NodeSlices) Stats() resourceslice.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl == nil {
		return resourceslice.Stats{}
	}
	return s.ctrl.GetStats()
}

// Stop stops the controller and waits for it: once it returns, this
// bridge writes no slice, and the node's lock may be let go. The slices
// stay.
func (s *NodeSlices) Stop() {
	s.cancel()
	<-s.started
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctrl.Stop() // nil-safe
}

// gatedQueue is the library's default work queue of the slice
// controller, whose Get waits until open (or ShutDown): the controller's
// one worker syncs nothing before the first Publish.
type gatedQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	opened, shut       chan struct{}
	openOnce, shutOnce sync.Once
}

func newGatedQueue() *gatedQueue {
	return &gatedQueue{
		// As resourceslice.newController makes it when Options.Queue is nil.
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node_resource_slices"}),
		opened: make(chan struct{}), shut: make(chan struct{}),
	}
}

func (q *gatedQueue) open() { q.openOnce.Do(func() { close(q.opened) }) }

// Get waits for open, then gets as the queue does.
func (q *gatedQueue) Get() (string, bool) {
	select {
	case <-q.opened:
	case <-q.shut:
	}
	return q.TypedRateLimitingInterface.Get()
}

func (q *gatedQueue) ShutDown() {
	q.shutOnce.Do(func() { close(q.shut) })
	q.TypedRateLimitingInterface.ShutDown()
}

func (q *gatedQueue) ShutDownWithDrain() {
	q.shutOnce.Do(func() { close(q.shut) })
	q.TypedRateLimitingInterface.ShutDownWithDrain()
}

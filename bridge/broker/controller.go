package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"

	"github.com/cdiexec/cdi/bridge/elected"
)

// Timing of the controller's looks at a Broker.
const (
	// workloadSettle is how long after an event of a Broker's objects
	// (a Job's pod finishing, say) the Broker is looked at: a burst of
	// events, 1,000 Jobs being made, is one look and at most one status
	// write.
	workloadSettle = time.Second
	// devicesMinGap is the least time between two reads of the devices:
	// the store says it changed with every slot claimed in the cluster.
	devicesMinGap = time.Second
	// devicesPoll reads the devices whatever the store says.
	devicesPoll = 30 * time.Second
	// resyncEvery looks at every Broker, whatever happened.
	resyncEvery = 10 * time.Minute
	// retryFirst and retryMax bound the retries of a Broker whose look
	// failed (the API server unreachable, a status write that conflicted).
	retryFirst = time.Second
	retryMax   = 5 * time.Minute
)

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("broker controller configuration")

// Config says where the controller works and as whom.
type Config struct {
	// Client makes the workloads. The bridge gives the controller clients
	// of its own, at the rate limits of kube.ClientQPS and ClientBurst:
	// 1,000 Jobs take 20 s at 50 a second, where client-go's default of 5
	// would take over 3 minutes.
	Client kubernetes.Interface
	// Dynamic reads the Brokers and writes their status.
	Dynamic dynamic.Interface
	// Metadata reads the names of every object of the kinds it makes in
	// the namespaces served, its own or not (names).
	Metadata metadata.Interface
	// Namespaces are those whose Brokers are acted on, where the bridge
	// may write workloads; a Broker elsewhere is told so in its status.
	Namespaces []string
	// Domain is the bridge's --domain: the prefix of the resources the
	// workloads request, and the DRA driver's name.
	Domain string
	// DRAPools are the pools served through DRA (--dra-pools): their
	// devices are read from the driver's ResourceSlices, and their
	// workloads get claims instead of resources.
	DRAPools []string
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

// Controller makes and removes the workloads the Brokers want, while its
// bridge leads.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	served map[string]bool
	dra    map[string]bool
	// Hooks of the tests: beforeWrite is called before every write (a
	// delete's last look for its device included), afterLook after every
	// look at a Broker.
	beforeWrite func(action)
	afterLook   func(key string, err error)
}

// New checks cfg.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Dynamic == nil || cfg.Metadata == nil || cfg.Domain == "" || len(cfg.Namespaces) == 0 {
		return nil, fmt.Errorf("%w: Client, Dynamic, Metadata, Domain and Namespaces are required", ErrConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "brokers"), served: map[string]bool{}, dra: map[string]bool{}}
	for _, ns := range cfg.Namespaces {
		c.served[ns] = true
	}
	for _, p := range cfg.DRAPools {
		c.dra[p] = true
	}
	return c, nil
}

// Name is the controller's name as an elected.Job, in the log.
func (c *Controller) Name() string { return "Brokers" }

// Run acts on the Brokers until ctx ends, reading the devices of the
// pools served by device plugins from store, the elected bridge's
// Instance store of every pool; it returns nil then. It acts only once
// every view it reads is complete: a leader that acted on half a list
// would take the devices it has not read yet for gone. With Name, it
// makes the Controller an elected.Job.
func (c *Controller) Run(ctx context.Context, store elected.Store) error {
	r, err := c.start(ctx, store)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	c.log.Info("acting on Brokers", "namespaces", c.cfg.Namespaces, "draPools", c.cfg.DRAPools)
	defer c.log.Info("no longer acting on Brokers")
	var wg sync.WaitGroup
	wg.Go(func() { r.watchDevices(ctx) })
	wg.Go(func() { r.resync(ctx) })
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	for r.next(ctx) {
	}
	wg.Wait()
	return nil
}

// next handles the next queued Broker; false once the queue is shut down.
func (r *run) next(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(key)
	r.releaseOrphans(ctx, key)
	br, err := r.broker(key)
	if err != nil {
		err = r.unreadable(ctx, key, err)
	}
	if br == nil {
		r.after(ctx, key, 0, err)
		return true
	}
	again, err := r.reconcile(ctx, br)
	r.after(ctx, key, again, err)
	return true
}

// after queues key again: with the queue's backoff for an error, and
// after again in any case (the queue keeps the sooner of the two).
func (r *run) after(ctx context.Context, key string, again time.Duration, err error) {
	if r.afterLook != nil {
		r.afterLook(key, err)
	}
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		r.log.Warn("acting on a Broker; will retry", "broker", key, "error", err, "retries", r.queue.NumRequeues(key))
		r.queue.AddRateLimited(key)
	} else {
		r.queue.Forget(key)
	}
	if again > 0 {
		r.queue.AddAfter(key, again)
	}
}

// resync queues every Broker every resyncEvery, until ctx ends.
func (r *run) resync(ctx context.Context) {
	tick := time.NewTicker(resyncEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			for _, key := range r.brokers.GetIndexer().ListKeys() {
				r.queue.Add(key)
			}
			for _, key := range r.heldJobsBrokers() {
				r.queue.Add(key)
			}
		}
	}
}

// heldJobsBrokers are the keys of the Brokers of the Jobs being deleted
// that FinalizerResult holds: a Broker gone before this controller
// started, or whose delete it missed, is looked at, and its Jobs let go.
func (r *run) heldJobsBrokers() []string {
	keys := map[string]bool{}
	for ns, kinds := range r.workloads {
		if kinds["Job"] == nil {
			continue
		}
		for _, obj := range kinds["Job"].GetStore().List() {
			if j, ok := obj.(*batchv1.Job); ok && j.DeletionTimestamp != nil && slices.Contains(j.Finalizers, FinalizerResult) {
				keys[ns+"/"+j.Labels[LabelBroker]] = true
			}
		}
	}
	return sortedKeys(keys)
}

// watchDevices reads the devices when the store, the slices or the
// Nodes say they changed, at most every devicesMinGap, and at least every devicesPoll,
// until ctx ends, and queues the Brokers of every pool whose devices
// changed since the last read.
func (r *run) watchDevices(ctx context.Context) {
	var changes <-chan struct{}
	if cs, ok := r.store.(interface {
		Changes() (<-chan struct{}, func())
	}); ok {
		ch, stop := cs.Changes()
		defer stop()
		changes = ch
	}
	tick := time.NewTicker(devicesPoll)
	defer tick.Stop()
	var last map[string]string
	for {
		if byPool, err := r.devices(ctx); err == nil {
			now := fingerprints(byPool)
			if last != nil {
				for _, pool := range changedPools(last, now) {
					r.queuePool(pool)
				}
			}
			last = now
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(devicesMinGap):
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-r.devicesChanged:
		case <-tick.C:
		}
	}
}

// queuePool queues every Broker of pool.
func (r *run) queuePool(pool string) {
	objs, err := r.brokers.GetIndexer().ByIndex(byPool, pool)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if m, ok := obj.(metav1.Object); ok {
			r.queue.Add(m.GetNamespace() + "/" + m.GetName())
		}
	}
}

// newQueue is the queue of Broker keys: a failed Broker is retried soon,
// then less and less often.
func newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryFirst, retryMax))
}

// sortedKeys is m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

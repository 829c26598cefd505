package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/handover"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
)

// startSlices starts the controller of the node's ResourceSlices when
// --dra-pools names any pool, else returns nil: as early as the bridge
// knows the API client, the driver and the node, so that the library's
// second-long start (bridge/dra.NodeSlices) passes while the Instance
// store syncs and the first discovery runs. It publishes nothing before
// the DRA front end's first publish, nor, with the node lock (lock not
// nil), before this bridge holds it. Its error is for flags that do not
// allow DRA.
func startSlices(ctx context.Context, o *options, api *kubeAccess, lock *handover.Lock, log *slog.Logger) (*dra.NodeSlices, error) {
	if len(drafront.ParsePools(o.draPools)) == 0 {
		return nil, nil
	}
	if !o.cdiNames {
		return nil, fmt.Errorf("%w: --dra-pools needs CDI: DRA gives containers devices by CDI names only, and --cdi-names is false", errUsage)
	}
	if api == nil {
		return nil, fmt.Errorf("%w: --dra-pools needs the Kubernetes API: --kubeconfig, or run in a pod", errUsage)
	}
	var held <-chan struct{}
	if lock != nil {
		held = lock.Held()
	}
	return drafront.StartSlices(ctx, o.domain, o.nodeName, api.client, log, dra.AfterLock(held)), nil
}

// startDRA starts the DRA front end over slices, the node's slice
// controller (startSlices), or returns nil when that is nil: DRA is off.
// It stops when ctx ends; onFatal is told of an error its kubelet plugin
// cannot recover from. store is the node's Instance store, cdiDir its
// CDI spec directory (the node's files and the claims' share it),
// podResources the kubelet's PodResources API (nil: off); m gets its
// checkpoint's fate, its claims and its devices.
func startDRA(ctx context.Context, o *options, api *kubeAccess, slices *dra.NodeSlices, store instance.Store, cdiDir *cdispec.Dir,
	podResources reclaim.Lister,
	m *metrics.Metrics, log *slog.Logger, onFatal func(error)) (*drafront.FrontEnd, error) {
	if slices == nil {
		return nil, nil
	}
	log.Info("DRA pools", "pools", o.draPools)
	front, err := drafront.Start(ctx, drafront.Config{NodeName: o.nodeName, Driver: o.domain, Client: api.client, CDI: cdiDir,
		Checkpoint: o.draCheckpoint, PluginDir: o.draPluginDir, RegistrarDir: o.draRegistrarDir, Store: store,
		Kubelet: podResources, Grace: o.reclaimGrace, SweepPeriod: o.reclaimEvery,
		OnSetAside: m.DRACheckpointSetAside, OnClaim: m.DRAClaim, Logger: log, OnFatal: onFatal, Slices: slices,
		PodUID: types.UID(o.podUID)})
	if err != nil {
		return nil, err
	}
	m.DRAPools(front.Published)
	return front, nil
}

// frontEnds hands each discovery to the front ends: the pools of
// --dra-pools (with their drop-ins' other pools, drafront.Split) to the
// DRA front end, when it runs, the others to the device plugins' node.
//
// While another bridge of the node holds the node lock (--node-lock:
// the old pod of a rolling update with maxSurge), the pools are split as
// that holder's record says (its --dra-pools), not by this bridge's own:
// a pool is served by one front end at a time, and the CDI spec files
// the holder's device-plugin containers need are kept. A pool the holder
// serves through DRA is held back from the device plugins when this
// bridge runs no DRA front end. Once the lock is had, the last discovery
// is handed over again at once, split by this bridge's own pools.
type frontEnds struct {
	node     *node.Node
	dra      *drafront.FrontEnd // nil: DRA off
	draPools map[string]bool
	lock     *handover.Lock // nil: --node-lock off
	log      *slog.Logger

	// mu serializes the handing over, of a discovery or of the last
	// again. last is the newest discovery, nil before the first; holder
	// the holder's DRA pools, nil while its record cannot be read (the
	// bridge's own pools then split them); heldBack the pools last held
	// back from the device plugins.
	mu       sync.Mutex
	last     *discovery.Update
	holder   map[string]bool
	heldBack []string
}

func newFrontEnds(n *node.Node, front *drafront.FrontEnd, draPools map[string]bool, lock *handover.Lock, log *slog.Logger) *frontEnds {
	f := &frontEnds{node: n, dra: front, draPools: draPools, lock: lock, log: log}
	if f.waiting() {
		f.holder = f.holderPools()
	}
	return f
}

// publish is discovery's publish: it splits u between the front ends.
func (f *frontEnds) publish(ctx context.Context) func(discovery.Update) {
	return func(u discovery.Update) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.last = &u
		f.hand(ctx, u)
	}
}

// hand splits u between the front ends; called with f.mu held.
func (f *frontEnds) hand(ctx context.Context, u discovery.Update) {
	listed := f.draPools
	if f.waiting() && f.holder != nil {
		listed = f.holder
	}
	devicePlugins, viaDRA := drafront.Split(u.Pools, listed)
	if f.dra != nil {
		f.dra.SetPools(viaDRA)
	} else {
		f.holdBack(viaDRA)
	}
	f.node.Publish(ctx, discovery.Update{Pools: devicePlugins, Event: u.Event})
}

// waiting says whether another bridge holds the node lock.
func (f *frontEnds) waiting() bool {
	if f.lock == nil {
		return false
	}
	select {
	case <-f.lock.Held():
		return false
	default:
		return true
	}
}

// holdBack logs the pools held back from the device plugins, served
// through DRA by the lock's holder, when they change.
func (f *frontEnds) holdBack(pools []discovery.Pool) {
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
	}
	switch {
	case slices.Equal(names, f.heldBack):
	case len(names) > 0:
		f.log.Info("pools held back from the device plugins: the bridge holding the node lock serves them through DRA, and this one runs no DRA front end",
			"pools", names)
	default:
		f.log.Info("pools no longer held back from the device plugins", "pools", f.heldBack)
	}
	f.heldBack = names
}

// holderPools is the DRA pools of the node lock's holder, from its
// record; nil if that cannot be read.
func (f *frontEnds) holderPools() map[string]bool {
	rec, err := f.lock.Holder()
	if err != nil {
		return nil
	}
	pools := map[string]bool{}
	for _, p := range rec.DRAPools {
		pools[p] = true
	}
	return pools
}

// follow, while another bridge holds the node lock, reads its record
// every period and hands the last discovery over again when the
// holder's DRA pools change (or its record, unreadable at the start,
// can be read); once the lock is had, it hands it over split by this
// bridge's own pools, and returns. It returns at once
// without the node lock, or when ctx ends.
func (f *frontEnds) follow(ctx context.Context, period time.Duration) {
	if f.lock == nil {
		return
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.lock.Held():
			f.handAgain(ctx, nil)
			return
		case <-tick.C:
			// A record that cannot be read changes nothing: it is gone
			// when its holder lets the lock go, which is then had.
			if pools := f.holderPools(); pools != nil {
				f.handAgain(ctx, pools)
			}
		}
	}
}

// handAgain hands the last discovery over again if holder, the holder's
// DRA pools (nil: this bridge's own), differs from the last split's.
func (f *frontEnds) handAgain(ctx context.Context, holder map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if (holder == nil) == (f.holder == nil) && maps.Equal(holder, f.holder) {
		return
	}
	f.holder = holder
	if holder != nil {
		f.log.Info("the node lock's holder serves other pools through DRA: splitting the pools anew",
			"holderDRAPools", slices.Sorted(maps.Keys(holder)))
	}
	if f.last != nil {
		// Event is for the latency of a device event: none here.
		f.hand(ctx, discovery.Update{Pools: f.last.Pools})
	}
}

// holds is discovery's Keep: a vanished device stays while a front end
// says it is held, a container's slot or a prepared claim.
func (f *frontEnds) holds(pool string, dev spec.DeviceInfo) bool {
	return f.node.Holds(pool, dev) || (f.dra != nil && f.dra.Holds(pool, dev))
}

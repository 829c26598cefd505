package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
)

// draFrontEnd serves the pools of --dra-pools through DRA: the node's
// own devices in its slices, the shared devices through the Instance
// store, from which the elected bridge publishes them (leadShared).
type draFrontEnd struct {
	listed    map[string]bool
	node      string
	driver    string
	client    kubernetes.Interface
	preparer  *dradevices.Preparer
	publisher dra.Publisher
	getClaim  dradevices.GetClaim
	// registered is nil once the kubelet has registered the driver.
	registered func() error
	// store is the node's Instance store, told what shared devices the
	// node sees.
	store instance.Store
	log   *slog.Logger

	// pending is the newest discovery not yet handed to the publisher;
	// wake is told when pending is set. pools is the newest DRA pools,
	// nil before the first discovery; poolsChanged is told when they
	// are set.
	mu           sync.Mutex
	pending      *draUpdate
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

// draUpdate is a discovery's DRA pools and the node's slices of them.
type draUpdate struct {
	pools []discovery.Pool
	res   resourceslice.DriverResources
}

// parsePoolList is --dra-pools as a set; empty is none.
func parsePoolList(s string) map[string]bool {
	out := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out[p] = true
		}
	}
	return out
}

// splitPools divides pools between the device plugins and DRA. A listed
// pool goes to DRA with every other pool of its drop-in: the pools of a
// drop-in share the plugin's state, and the device plugins' reclaim runs
// GC on that state with only the slots they know, which would release
// the DRA front end's allocations.
func splitPools(pools []discovery.Pool, listed map[string]bool) (devicePlugins, viaDRA []discovery.Pool) {
	dropIns := map[string]bool{}
	for _, p := range pools {
		if listed[p.Name] {
			dropIns[p.Conf.Path] = true
		}
	}
	for _, p := range pools {
		if dropIns[p.Conf.Path] {
			viaDRA = append(viaDRA, p)
		} else {
			devicePlugins = append(devicePlugins, p)
		}
	}
	return devicePlugins, viaDRA
}

// split is node.Config.Split: the DRA pools of u are handed to the
// preparer and to the publishing goroutine, the rest returned to the node.
func (f *draFrontEnd) split(u discovery.Update) discovery.Update {
	rest, viaDRA := splitPools(u.Pools, f.listed)
	f.preparer.SetPools(viaDRA)
	if viaDRA == nil {
		viaDRA = []discovery.Pool{} // discovered: none
	}
	f.mu.Lock()
	f.pending = &draUpdate{pools: viaDRA, res: dradevices.Resources(f.node, viaDRA)}
	f.pools = viaDRA
	f.mu.Unlock()
	tell(f.wake)
	tell(f.poolsChanged)
	u.Pools = rest
	return u
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
func (f *draFrontEnd) publish(ctx context.Context) {
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

// startDRA starts the DRA front end when --dra-pools names any pool, else
// returns nil. Its kubelet plugin stops when ctx ends. store is the
// node's Instance store.
func startDRA(ctx context.Context, o *options, cfg *rest.Config, store instance.Store, log *slog.Logger, onFatal func(error)) (*draFrontEnd, error) {
	listed := parsePoolList(o.draPools)
	if len(listed) == 0 {
		return nil, nil
	}
	if !o.cdiNames {
		return nil, fmt.Errorf("%w: --dra-pools needs CDI: DRA gives containers devices by CDI names only, and --cdi-names is false", errUsage)
	}
	client, err := draClient(o, cfg)
	if err != nil {
		return nil, err
	}
	ckpt, err := dradevices.LoadCheckpoint(o.draCheckpoint)
	if err != nil {
		return nil, err
	}
	cdiDir, err := cdispec.Open(o.cdiSpecDir, o.domain)
	if err != nil {
		return nil, fmt.Errorf("--cdi-spec-dir, --domain: %w", err)
	}
	p := &dradevices.Preparer{Driver: o.domain, Node: o.nodeName, CDI: cdiDir, Vendor: o.domain, Checkpoint: ckpt, Logger: log}
	if o.podUID != "" {
		p.PluginDir = dra.PluginDir(o.draPluginDir, o.domain) // shared with the other pod of a rolling update
	}
	if err := p.RestoreSpecs(); err != nil {
		log.Error("rewriting the CDI specs of prepared claims", "error", err)
	}
	d, err := dra.Start(ctx, dra.Config{DriverName: o.domain, NodeName: o.nodeName, Client: client, Devices: p,
		PluginDir: o.draPluginDir, RegistrarDir: o.draRegistrarDir, Logger: log, OnFatal: onFatal, PodUID: types.UID(o.podUID)})
	if err != nil {
		return nil, err
	}
	log.Info("DRA front end", "driver", o.domain, "pools", o.draPools, "checkpoint", o.draCheckpoint, "prepared", len(ckpt.UIDs()))
	getClaim := func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
		return client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	f := &draFrontEnd{listed: listed, node: o.nodeName, driver: o.domain, client: client, preparer: p, publisher: d,
		getClaim: getClaim, store: store, registered: d.Registered, log: log, wake: make(chan struct{}, 1),
		poolsChanged: make(chan struct{}, 1)}
	go f.publish(ctx)
	return f, nil
}

// draClient is the client of the store's configuration, else of
// --kubeconfig or the pod's: DRA needs the API even with the local store.
func draClient(o *options, cfg *rest.Config) (kubernetes.Interface, error) {
	if cfg == nil && o.kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		cfg = c
	}
	if cfg == nil {
		c, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, fmt.Errorf("%w: --dra-pools needs the Kubernetes API: --kubeconfig, or run in a pod", errUsage)
		}
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration: %w", err)
		}
		cfg = c
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "cdi-bridge-dra/" + o.nodeName
	return kubernetes.NewForConfig(cfg)
}

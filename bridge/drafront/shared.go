package drafront

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/instance"
)

// Timing of the leader's publishing of shared devices: it republishes
// when the store says something changed, at most every sharedMinGap (a
// busy store changes with every device-plugin claim of the cluster), and
// every sharedPoll whatever it says.
const (
	sharedMinGap = time.Second
	sharedPoll   = 10 * time.Second
)

// sharedSeen is what this node sees of pool's shared devices, as the
// Instance store records it: the healthy ones, so that a node whose
// camera is unreachable leaves its node selector.
func sharedSeen(node string, p discovery.Pool) []instance.Instance {
	out := []instance.Instance{}
	for _, d := range p.Devices {
		if d.Shared && d.Healthy {
			out = append(out, instance.Instance{Name: instance.Name(p.Name, d.ID, node, true), Config: p.Name, DeviceID: d.ID,
				Shared: true, Capacity: d.Capacity, Properties: d.Properties})
		}
	}
	return out
}

// observeShared tells the store which shared devices of the DRA pools
// this node sees, and that it sees none of a pool gone since the last
// call, so that the leader publishes them with this node in their node
// selectors. A pool without shared devices is not recorded, unless it had
// some before, or this is the front end's first call: after a restart
// every pool is recorded, since the node's sightings of before are not
// known. An Observe that fails is tried again at the next call, whatever
// the pool has then; failed says one did. Called by the observing
// goroutine only (observe).
func (f *FrontEnd) observeShared(ctx context.Context, pools []discovery.Pool) (failed bool) {
	first := f.observed == nil
	next := map[string]bool{} // the pools to record at the next call
	served := map[string]bool{}
	for _, p := range pools {
		served[p.Name] = true
		seen := sharedSeen(f.node, p)
		if len(seen) == 0 && !first && !f.observed[p.Name] {
			continue
		}
		if err := f.store.Observe(ctx, f.node, p.Name, seen); err != nil {
			f.log.Error("recording the shared devices of a DRA pool; trying again", "pool", p.Name, "error", err)
			failed, next[p.Name] = true, true
			continue
		}
		next[p.Name] = len(seen) > 0
	}
	for name := range f.observed {
		if served[name] {
			continue
		}
		if err := f.store.Observe(ctx, f.node, name, nil); err != nil {
			f.log.Error("recording a DRA pool gone; trying again", "pool", name, "error", err)
			failed, next[name] = true, true
		}
	}
	f.observed = map[string]bool{}
	for name, again := range next {
		if again {
			f.observed[name] = true
		}
	}
	return failed
}

// changeSource is a store that says when it changed (kube.Store).
type changeSource interface {
	Changes() (<-chan struct{}, func())
}

// SharedJob is the elected bridge's job (elected.Job) of publishing
// the shared devices of the DRA pools once for the cluster.
func (f *FrontEnd) SharedJob() elected.Job { return sharedJob{f} }

// sharedJob is FrontEnd.SharedJob.
type sharedJob struct{ f *FrontEnd }

// Name is the job's name in the log.
func (sharedJob) Name() string { return "DRA shared devices" }

// Run, until ctx ends, keeps the shared devices of the DRA pools
// published once for the cluster (dradevices.SharedResources) from
// store, the elected bridge's view of every Instance and Presence, with a
// slice controller of no owner, which manages exactly the driver's slices
// that name no node. When ctx ends the controller stops and the slices
// stay: the next leader's controller adopts them as they are and changes
// only what differs.
//
// The controller starts only once this bridge's discovery has handed over
// its pools: started with no resources it would delete the slices the
// last leader published.
//
// It returns nil when ctx ends, an error when the Nodes cannot be
// watched.
func (j sharedJob) Run(ctx context.Context, store elected.Store) error {
	f := j.f
	f.log.Info("leading: publishing the shared devices of the DRA pools")
	hostname, err := f.watchHostnames(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watching the Nodes' hostname labels: %w", err)
	}
	var changes <-chan struct{}
	if cs, ok := store.(changeSource); ok {
		ch, stop := cs.Changes()
		defer stop()
		changes = ch
	}
	tick := time.NewTicker(sharedPoll)
	defer tick.Stop()
	var ctrl *resourceslice.Controller
	defer func() {
		if ctrl != nil {
			ctrl.Stop()
		}
	}()
	for {
		if res, ok := f.sharedResources(ctx, store, hostname); ok {
			if ctrl == nil {
				ctrl = f.startSharedController(ctx, res)
			} else {
				ctrl.Update(res)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(sharedMinGap):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-f.poolsChanged:
		case <-tick.C:
		}
	}
}

// sharedResources is what the leader publishes now; false before the
// first discovery, or when the store cannot list every Instance.
func (f *FrontEnd) sharedResources(ctx context.Context, store elected.Store, hostname func(string) string) (*resourceslice.DriverResources, bool) {
	f.mu.Lock()
	pools := f.pools
	f.mu.Unlock()
	if pools == nil {
		return nil, false
	}
	all, err := store.List(ctx)
	if err != nil {
		f.log.Warn("listing the Instances of shared devices; publishing them later", "error", err)
		return nil, false
	}
	res := dradevices.SharedResources(pools, all, hostname)
	return &res, true
}

// startSharedController starts the controller of the shared pools'
// slices, or returns nil (logged) to try again at the next change.
func (f *FrontEnd) startSharedController(ctx context.Context, res *resourceslice.DriverResources) *resourceslice.Controller {
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{DriverName: f.driver, KubeClient: f.client, Resources: res,
		SyncDelay: f.sliceSyncDelay, ErrorHandler: func(_ context.Context, err error, msg string) {
			f.log.Error("publishing the shared devices' ResourceSlices: "+msg, "error", err)
		}})
	if err != nil {
		f.log.Error("starting the controller of the shared devices' ResourceSlices", "error", err)
		return nil
	}
	return ctrl
}

// watchHostnames starts an informer of the Nodes' kubernetes.io/hostname
// labels, running until ctx ends, and returns, once it holds the first
// list, the label of a node by name: what a device's node selector
// names (dradevices.NodesSelector). A node without a Node object or the
// label (the kubelet sets it) is taken to have its name as its hostname,
// as it has unless --hostname-override and the node name differ.
func (f *FrontEnd) watchHostnames(ctx context.Context) (func(node string) string, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(f.client, 0, informers.WithTransform(hostnameOnly))
	informer := factory.Core().V1().Nodes().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("listing nodes: %w", ctx.Err())
	}
	nodes := informer.GetStore()
	return func(node string) string {
		obj, ok, _ := nodes.GetByKey(node)
		if n, isNode := obj.(*corev1.Node); ok && isNode && n.Labels[corev1.LabelHostname] != "" {
			return n.Labels[corev1.LabelHostname]
		}
		return node
	}, nil
}

// hostnameOnly keeps of a Node its name and hostname label: the leader
// holds every Node.
func hostnameOnly(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	keep := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}}
	if h, ok := n.Labels[corev1.LabelHostname]; ok {
		keep.Labels = map[string]string{corev1.LabelHostname: h}
	}
	return keep, nil
}

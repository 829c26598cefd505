package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Index names of the informers.
const (
	byPool   = "pool"   // a Broker's spec.pool; a slice's bridge pool
	byBroker = "broker" // an object's LabelBroker
	byDevice = "device" // a slice's devices' keys (instance.Name)
)

// run is the controller while its bridge leads: its informers, queue and
// memory of its recent writes.
type run struct {
	*Controller
	store   Instances
	queue   workqueue.TypedRateLimitingInterface[string]
	brokers cache.SharedIndexInformer
	// workloads are, per namespace served, the informers of the objects
	// the controller makes there, by kind.
	workloads map[string]map[string]cache.SharedIndexInformer
	// slices is the informer of the driver's ResourceSlices, nil without
	// DRA pools; nodes the Nodes' allocatable of the domain's resources.
	// devicesChanged is told of their events.
	slices, nodes  cache.SharedIndexInformer
	devicesChanged chan struct{}
	recent         *recentWrites
	gone           *goneClock
	// names knows every object's name of the kinds made; classes is the
	// informer of the DeviceClasses, nil without DRA pools.
	names   *names
	classes cache.SharedIndexInformer
	events  events.EventRecorder
}

// start starts the informers, until ctx ends, and returns once each
// holds its first list.
func (c *Controller) start(ctx context.Context, store Instances) (*run, error) {
	r := &run{Controller: c, store: store, queue: newQueue(), workloads: map[string]map[string]cache.SharedIndexInformer{},
		devicesChanged: make(chan struct{}, 1), recent: newRecentWrites(), gone: newGoneClock()}
	r.brokers = dynamicinformer.NewFilteredDynamicInformer(c.cfg.Dynamic, Resource, metav1.NamespaceAll, 0, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, byPool: brokerPool}, nil).Informer()
	if err := r.brokers.SetTransform(dropManagedFields); err != nil {
		return nil, err
	}
	if _, err := r.brokers.AddEventHandler(r.brokerEvents()); err != nil {
		return nil, err
	}
	nodes, err := r.startNodes(ctx)
	if err != nil {
		return nil, err
	}
	synced := []cache.InformerSynced{r.brokers.HasSynced, nodes}
	kinds := []string{"Job", "Deployment", "Service"}
	if len(c.dra) > 0 {
		kinds = append(kinds, "ResourceClaimTemplate")
	}
	var namesSynced []cache.InformerSynced
	r.names, namesSynced = startNames(ctx, c.cfg.Metadata, sortedKeys(c.served), kinds, r.queue.Add)
	synced = append(synced, namesSynced...)
	r.events = r.startEvents(ctx)
	for _, ns := range sortedKeys(c.served) {
		s, err := r.startWorkloads(ctx, ns)
		if err != nil {
			return nil, err
		}
		synced = append(synced, s...)
	}
	if len(c.dra) > 0 {
		s, err := r.startSlices(ctx)
		if err != nil {
			return nil, err
		}
		synced = append(synced, s)
	}
	go r.brokers.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("listing Brokers, their workloads and the devices: %w", ctx.Err())
	}
	return r, nil
}

// brokerEvents queues a Broker when it is made, its spec changes or it
// is being deleted (the controller's own status writes do none of
// these), and when it is gone: its Jobs kept as records are let go.
func (r *run) brokerEvents() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { r.queueObject(obj) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(metav1.Object), obj.(metav1.Object)
			if o.GetGeneration() != n.GetGeneration() || o.GetUID() != n.GetUID() ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) {
				r.queueObject(obj)
			}
		},
		DeleteFunc: func(obj any) { r.queueObject(obj) },
	}
}

func (r *run) queueObject(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		r.queue.Add(key)
	}
}

// startWorkloads starts the informers of the objects the controller
// makes in ns, the objects that carry LabelBroker only, and returns their
// HasSynced. An event queues the object's Broker after workloadSettle.
func (r *run) startWorkloads(ctx context.Context, ns string) ([]cache.InformerSynced, error) {
	f := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelBroker }),
		informers.WithTransform(dropManagedFields))
	kinds := map[string]cache.SharedIndexInformer{
		"Job":        f.Batch().V1().Jobs().Informer(),
		"Deployment": f.Apps().V1().Deployments().Informer(),
		"Service":    f.Core().V1().Services().Informer(),
	}
	if len(r.dra) > 0 {
		kinds["ResourceClaimTemplate"] = f.Resource().V1().ResourceClaimTemplates().Informer()
	}
	var synced []cache.InformerSynced
	for _, inf := range kinds {
		if err := inf.AddIndexers(cache.Indexers{byBroker: labelBroker}); err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(r.workloadEvents()); err != nil {
			return nil, err
		}
		synced = append(synced, inf.HasSynced)
	}
	r.workloads[ns] = kinds
	f.Start(ctx.Done())
	return synced, nil
}

// workloadEvents queues an object's Broker, after workloadSettle.
func (r *run) workloadEvents() cache.ResourceEventHandler {
	queue := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, ok := obj.(metav1.Object); ok && m.GetLabels()[LabelBroker] != "" {
			r.queue.AddAfter(m.GetNamespace()+"/"+m.GetLabels()[LabelBroker], workloadSettle)
		}
	}
	gone := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			r.recent.forget(kindOf(m), m)
			r.gone.forget(m.GetUID())
		}
		queue(obj)
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: queue, UpdateFunc: func(_, obj any) { queue(obj) }, DeleteFunc: gone}
}

// startSlices starts the informer of the driver's ResourceSlices.
func (r *run) startSlices(ctx context.Context) (cache.InformerSynced, error) {
	f := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, 0, informers.WithTransform(dropManagedFields),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.driver", r.cfg.Domain).String()
		}))
	r.slices = f.Resource().V1().ResourceSlices().Informer()
	if err := r.slices.AddIndexers(cache.Indexers{byDevice: r.sliceDevices, byPool: r.slicePool}); err != nil {
		return nil, err
	}
	if _, err := r.slices.AddEventHandler(r.tellDevicesChanged()); err != nil {
		return nil, err
	}
	classes := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, 0, informers.WithTransform(dropManagedFields))
	r.classes = classes.Resource().V1().DeviceClasses().Informer()
	f.Start(ctx.Done())
	classes.Start(ctx.Done())
	return func() bool { return r.slices.HasSynced() && r.classes.HasSynced() }, nil
}

// sliceDevices indexes a ResourceSlice by its devices' keys.
func (r *run) sliceDevices(obj any) ([]string, error) {
	s, ok := obj.(*resourceapi.ResourceSlice)
	if !ok {
		return nil, nil
	}
	node := ""
	if s.Spec.NodeName != nil {
		node = *s.Spec.NodeName
	}
	var keys []string
	for _, dev := range s.Spec.Devices {
		if d, ok := sliceDevice(dev, r.cfg.Domain, node); ok {
			keys = append(keys, d.Key)
		}
	}
	return keys, nil
}

// slicePool indexes a ResourceSlice by the bridge's pool: a node's DRA
// pool is <node>/<pool> (dradevices.PoolName), a shared one <pool>.
func (r *run) slicePool(obj any) ([]string, error) {
	s, ok := obj.(*resourceapi.ResourceSlice)
	if !ok || s.Spec.Driver != r.cfg.Domain {
		return nil, nil
	}
	name := s.Spec.Pool.Name
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return []string{name}, nil
}

// poolServed says whether some node serves pool: a Node offers its
// device plugins' resource <domain>/<pool> (none of it allocatable, may
// be), or a ResourceSlice is of it.
func (r *run) poolServed(pool string) bool {
	if r.dra[pool] {
		objs, err := r.slices.GetIndexer().ByIndex(byPool, pool)
		return err == nil && len(objs) > 0
	}
	resource := corev1.ResourceName(r.cfg.Domain + "/" + pool)
	for _, obj := range r.nodes.GetStore().List() {
		if _, ok := obj.(*corev1.Node).Status.Allocatable[resource]; ok {
			return true
		}
	}
	return false
}

// classExists says whether DeviceClass name exists.
func (r *run) classExists(name string) bool {
	if r.classes == nil {
		return false
	}
	_, ok, err := r.classes.GetStore().GetByKey(name)
	return ok && err == nil
}

// devicePresent says whether the device of key is among pool's now, as
// devices reads them, looking at that device alone: its Instance (the
// store's Get, when it has one) or the slices that list it.
func (r *run) devicePresent(pool, key string) bool {
	if r.dra[pool] {
		return r.sliceListsDevice(pool, key)
	}
	getter, ok := r.store.(interface {
		Get(name string) (*instance.Instance, error)
	})
	if !ok {
		byPool, err := r.devices(context.Background())
		return err != nil || slices.ContainsFunc(byPool[pool], func(d Device) bool { return d.Key == key })
	}
	in, err := getter.Get(key)
	if err != nil {
		return true
	}
	return in != nil && len(fromInstances([]instance.Instance{*in}, r.cfg.Domain, r.allocatable)[pool]) > 0
}

// sliceListsDevice says whether a slice of pool's newest generation lists
// the device of key: an older generation's, on its way out, may still.
// A read that fails counts as listing it.
func (r *run) sliceListsDevice(pool, key string) bool {
	listing, err := r.slices.GetIndexer().ByIndex(byDevice, key)
	if err != nil || len(listing) == 0 {
		return err != nil
	}
	ofPool, err := r.slices.GetIndexer().ByIndex(byPool, pool)
	if err != nil {
		return true
	}
	newest := newestGenerations(typedSlices(ofPool), r.cfg.Domain)
	return slices.ContainsFunc(typedSlices(listing), func(s *resourceapi.ResourceSlice) bool {
		return s.Spec.Pool.Generation == newest[s.Spec.Pool.Name]
	})
}

// typedSlices is the ResourceSlices among objs.
func typedSlices(objs []any) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, 0, len(objs))
	for _, obj := range objs {
		if s, ok := obj.(*resourceapi.ResourceSlice); ok {
			out = append(out, s)
		}
	}
	return out
}

// startNodes starts the informer of the Nodes, of which it keeps the
// name and the allocatable count of each of the domain's resources.
func (r *run) startNodes(ctx context.Context) (cache.InformerSynced, error) {
	prefix := r.cfg.Domain + "/"
	f := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, 0, informers.WithTransform(func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		keep := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{}}}
		for name, q := range n.Status.Allocatable {
			if strings.HasPrefix(string(name), prefix) {
				keep.Status.Allocatable[name] = q
			}
		}
		return keep, nil
	}))
	r.nodes = f.Core().V1().Nodes().Informer()
	if _, err := r.nodes.AddEventHandler(r.tellDevicesChanged()); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	return r.nodes.HasSynced, nil
}

// tellDevicesChanged tells watchDevices of every event.
func (r *run) tellDevicesChanged() cache.ResourceEventHandler {
	tell := func(any) {
		select {
		case r.devicesChanged <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: tell, UpdateFunc: func(_, obj any) { tell(obj) }, DeleteFunc: tell}
}

// allocatable is Allocatable from the Nodes' informer.
func (r *run) allocatable(node, resource string) (int64, bool) {
	obj, ok, err := r.nodes.GetStore().GetByKey(node)
	if err != nil || !ok {
		return 0, false
	}
	q, ok := obj.(*corev1.Node).Status.Allocatable[corev1.ResourceName(resource)]
	return q.Value(), ok
}

// broker is the Broker of key, nil if there is none.
func (r *run) broker(key string) (*Broker, error) {
	u, err := r.brokerObject(key)
	if err != nil || u == nil {
		return nil, err
	}
	return fromUnstructured(u)
}

// brokerObject is the Broker object of key as the informer has it, or as
// the controller last wrote its status if the informer has not seen that
// yet; nil if there is none.
func (r *run) brokerObject(key string) (*unstructured.Unstructured, error) {
	obj, ok, err := r.brokers.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	u := obj.(*unstructured.Unstructured)
	for _, m := range r.recent.view(Kind, u.GetNamespace(), []any{u}) {
		if w, ok := m.(*unstructured.Unstructured); ok && w.GetName() == u.GetName() {
			return w, nil
		}
	}
	return u, nil
}

// devices are the devices of every pool now, by pool.
func (r *run) devices(ctx context.Context) (map[string][]Device, error) {
	all, err := r.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the Instances: %w", err)
	}
	byPool := fromInstances(all, r.cfg.Domain, r.allocatable)
	for pool := range r.dra {
		delete(byPool, pool)
	}
	if r.slices != nil {
		for pool, ds := range fromSlices(typedSlices(r.slices.GetStore().List()), r.cfg.Domain, r.dra) {
			byPool[pool] = ds
		}
	}
	return byPool, nil
}

// owned are br's objects: those the informers hold with its label and
// its UID as their controller, with the controller's own recent writes
// that the informers have not caught up with.
func (r *run) owned(br *Broker) owned {
	o := owned{jobs: map[string]*batchv1.Job{}, deployments: map[string]*appsv1.Deployment{},
		services: map[string]*corev1.Service{}, templates: map[string]*resourceapi.ResourceClaimTemplate{}}
	for kind, inf := range r.workloads[br.Namespace] {
		objs, _ := inf.GetIndexer().ByIndex(byBroker, br.Name)
		for _, m := range r.recent.view(kind, br.Namespace, objs) {
			if isOwner(m, br) {
				o.add(m)
			}
		}
	}
	return o
}

func (o owned) add(obj metav1.Object) {
	switch t := obj.(type) {
	case *batchv1.Job:
		o.jobs[t.Name] = t
	case *appsv1.Deployment:
		o.deployments[t.Name] = t
	case *corev1.Service:
		o.services[t.Name] = t
	case *resourceapi.ResourceClaimTemplate:
		o.templates[t.Name] = t
	}
}

// isOwner reports whether br is obj's controller.
func isOwner(obj metav1.Object, br *Broker) bool {
	ref := metav1.GetControllerOfNoCopy(obj)
	return ref != nil && ref.UID == br.UID
}

// brokerPool indexes a Broker by its spec.pool.
func brokerPool(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	pool, _, _ := unstructured.NestedString(u.Object, "spec", "pool")
	return []string{pool}, nil
}

// labelBroker indexes an object by its LabelBroker.
func labelBroker(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	if b := m.GetLabels()[LabelBroker]; b != "" {
		return []string{b}, nil
	}
	return nil, nil
}

// dropManagedFields is the informers' transform: the leader holds every
// object it watches, and never reads their managedFields.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

package broker

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// kindResources are the resources of the kinds the controller makes.
var kindResources = map[string]schema.GroupVersionResource{
	"Job":                   {Group: "batch", Version: "v1", Resource: "jobs"},
	"Deployment":            {Group: "apps", Version: "v1", Resource: "deployments"},
	"Service":               {Version: "v1", Resource: "services"},
	"ResourceClaimTemplate": {Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"},
}

// names knows, of each kind the controller makes in each namespace it
// serves, the names every object has, its own or not: a workload's name
// another object has is not asked for (a create would fail) while that
// object is there, and the Brokers that wanted it are looked at again
// when it goes. Only objects' metadata is held.
type names struct {
	informers map[string]map[string]cache.SharedIndexInformer // by namespace, by kind
	queue     func(key string)

	mu sync.Mutex
	// waiting are the Brokers whose last look found a name taken, by
	// namespace.
	waiting map[string]map[string]bool
}

// startNames starts the metadata informers of kinds in each of
// namespaces until ctx ends, and returns their HasSynced. queue is told
// the key of each Broker to look at again.
func startNames(ctx context.Context, client metadata.Interface, namespaces, kinds []string, queue func(string)) (*names, []cache.InformerSynced) {
	n := &names{informers: map[string]map[string]cache.SharedIndexInformer{}, queue: queue, waiting: map[string]map[string]bool{}}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		f := metadatainformer.NewFilteredSharedInformerFactory(client, 0, ns, nil)
		n.informers[ns] = map[string]cache.SharedIndexInformer{}
		for _, kind := range kinds {
			inf := f.ForResource(kindResources[kind]).Informer()
			_ = inf.SetTransform(dropManagedFields)
			_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { n.freed(ns) }})
			n.informers[ns][kind] = inf
			synced = append(synced, inf.HasSynced)
		}
		f.Start(ctx.Done())
	}
	return n, synced
}

// holder is the metadata of the object of kind named name in ns, nil
// for none.
func (n *names) holder(kind, ns, name string) metav1.Object {
	if n == nil || n.informers[ns][kind] == nil {
		return nil
	}
	obj, ok, err := n.informers[ns][kind].GetStore().GetByKey(ns + "/" + name)
	if !ok || err != nil {
		return nil
	}
	if m, isMeta := obj.(metav1.Object); isMeta {
		return m
	}
	return &metav1.ObjectMeta{Name: name, Namespace: ns} // of no controller: another's
}

// watch records whether the Broker of key waits for a name, another's
// or its own, to be looked at again when an object of its namespace
// goes.
func (n *names) watch(key string, taken bool) {
	if n == nil {
		return
	}
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !taken {
		delete(n.waiting[ns], key)
		return
	}
	if n.waiting[ns] == nil {
		n.waiting[ns] = map[string]bool{}
	}
	n.waiting[ns][key] = true
}

// freed queues the Brokers of ns that found a name taken: an object of
// ns went.
func (n *names) freed(ns string) {
	n.mu.Lock()
	var keys []string
	for key := range n.waiting[ns] {
		keys = append(keys, key)
	}
	n.mu.Unlock()
	for _, key := range keys {
		n.queue(key)
	}
}

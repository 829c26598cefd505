package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/fanout"
)

// Store is an instance.Store of Instance objects in one namespace. It is
// safe for concurrent use, and by bridges on many nodes at once.
type Store struct {
	client    dynamic.ResourceInterface
	namespace string
	informer  cache.SharedIndexInformer
	backoff   wait.Backoff

	changes fanout.Fanout

	mu sync.Mutex
	// recent are this Store's writes the informer has not caught up with,
	// by name.
	recent map[string]recentWrite
	// writes counts the API writes made, for the benchmarks, and
	// relists the lists resync made.
	writes, conflicts, relists int
	watch                      watchState
}

var _ instance.Store = (*Store)(nil)

// defaultBackoff bounds the retries after a conflicting write: Steps
// attempts in all, waiting Duration, then twice as long each time, up to
// Cap, each wait jittered by up to half so that racing nodes spread out.
// That retries for about two seconds in all: enough for a dozen nodes
// racing for one object, short enough for an Allocate to fail while the
// kubelet still waits.
func defaultBackoff() wait.Backoff {
	return wait.Backoff{Steps: 10, Duration: 5 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 500 * time.Millisecond}
}

// New is Start, then Synced on ctx.
func New(ctx context.Context, client dynamic.Interface, namespace string) (*Store, error) {
	s, err := Start(ctx, client, namespace)
	if err != nil {
		return nil, err
	}
	return s, s.Synced(ctx)
}

// Start returns a Store of the Instances in namespace and starts its
// informer, which runs until ctx ends. StartConfig also follows the
// informer's watch.
func Start(ctx context.Context, client dynamic.Interface, namespace string) (*Store, error) {
	s := makeStore(client, namespace)
	return s, s.start(ctx)
}

func makeStore(client dynamic.Interface, namespace string) *Store {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, namespace, nil)
	informer := factory.ForResource(Resource).Informer()
	// Only a Store that has not started its informer can fail to set it.
	_ = informer.SetTransform(dropManagedFields)
	return &Store{
		client: client.Resource(Resource).Namespace(namespace), namespace: namespace,
		informer: informer, backoff: defaultBackoff(),
		recent: map[string]recentWrite{}, watch: watchState{kick: make(chan struct{}, 1)},
	}
}

// dropManagedFields is the informer's transform: an object's
// managedFields (a timestamped entry per field manager, most of an
// Instance's metadata) are never read by the Store, and every bridge
// would hold them for every Instance it watches.
func dropManagedFields(obj any) (any, error) {
	if o, ok := obj.(*unstructured.Unstructured); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// start runs the informer, with the Store's event handlers, and resync.
func (s *Store) start(ctx context.Context) error {
	event := func(obj any) { s.caughtUp(obj); s.notify() }
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: event, DeleteFunc: event, UpdateFunc: func(_, obj any) { event(obj) },
	}); err != nil {
		return err
	}
	if err := s.informer.SetWatchErrorHandler(s.lostWatch); err != nil {
		return err
	}
	go s.informer.Run(ctx.Done())
	go s.resync(ctx)
	return nil
}

// Synced waits until the informer holds its first full list of
// Instances, or ctx ends: until then List would report none.
func (s *Store) Synced(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return fmt.Errorf("listing %s in namespace %q: %w", Resource.GroupResource(), s.namespace, ctx.Err())
	}
	return nil
}

// List implements instance.Store from the informer's cache and this
// Store's own writes: what it wrote, it reads back at once.
func (s *Store) List(ctx context.Context) ([]instance.Instance, error) {
	var out []instance.Instance
	var errs []error
	for _, obj := range s.objects() {
		in, err := toInstance(obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// cached returns the newest copy of the named Instance this Store knows
// of without asking the API server, or nil.
func (s *Store) cached(name string) (*instance.Instance, error) {
	key := name
	if s.namespace != "" {
		key = s.namespace + "/" + name
	}
	// The write first, as in objects: see recentWrites.
	s.mu.Lock()
	w, had := s.recent[name]
	s.mu.Unlock()
	item, _, err := s.informer.GetStore().GetByKey(key)
	if err != nil {
		return nil, err
	}
	cached, _ := item.(*unstructured.Unstructured)
	obj := newer(cached, w, had)
	if obj == nil {
		return nil, nil
	}
	in, err := toInstance(obj)
	return &in, err
}

// Get returns the named Instance as List shows it, nil when List shows
// none: for a caller that follows a few Instances and would otherwise
// convert every one of them on each change.
func (s *Store) Get(name string) (*instance.Instance, error) { return s.cached(name) }

// Changes implements instance.Store: every event of the informer, made
// here or by another node, reaches every receiver.
func (s *Store) Changes() (<-chan struct{}, func()) { return s.changes.Subscribe() }

func (s *Store) notify() { s.changes.Notify() }

// Stats are the API writes the Store made, how many of them conflicted,
// and how many lists it made itself while its informer lacked a watch.
type Stats struct{ Writes, Conflicts, Relists int }

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Writes: s.writes, Conflicts: s.conflicts, Relists: s.relists}
}

func (s *Store) count(conflict bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if conflict {
		s.conflicts++
	}
}

package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/fanout"
)

// Store is an instance.Store of Instance objects in one namespace. It is
// safe for concurrent use, and by bridges on many nodes at once.
type Store struct {
	dynamic        dynamic.Interface
	client         dynamic.ResourceInterface
	presenceClient dynamic.ResourceInterface
	namespace      string
	scope          Scope
	backoff        wait.Backoff
	// life is the context Start was given: the informers run until it
	// ends.
	life context.Context

	changes fanout.Fanout

	mu sync.Mutex
	// recent are this Store's writes the informer has not caught up with,
	// by name.
	recent map[string]recentWrite
	// writes counts the API writes made, for the benchmarks, and
	// relists the lists resync made.
	writes, conflicts, relists int
	// events counts the informers' events, for the tests and benchmarks.
	events int
	watch  watchState
	// informers follow the Instances, one per served pool with
	// ServedPools, one of every pool (under "") with AllPools.
	informers map[string]*poolInformer
	// followGen counts the changes of informers: relist applies its
	// lists only if none came meanwhile.
	followGen uint64
	// following is held for reading by what needs its pools followed
	// while it runs (a claim, an Observe starting to serve a pool), for
	// writing by retire, which stops following one.
	following sync.RWMutex
	// servers are, by pool, the nodes whose Observe reports it served.
	servers map[string]map[string]bool
	// presences are the Presences this Store knows, by name: those it
	// wrote or read, and with AllPools every one, from presenceInformer.
	presences        map[string]presence
	presenceInformer cache.SharedIndexInformer
	// own keeps the Presences of the nodes this Store observes for, with
	// ServedPools (own.go), deleting orphans after orphanAfter.
	own         ownPresences
	orphanAfter time.Duration
	// presenceMu serializes the writes of this Store's own Presences.
	presenceMu sync.Mutex
	// unseenSince is when PruneUnseen first found each Instance unseen,
	// by UID: an Instance deleted and created again is another object,
	// unseen since the pass that first finds it so.
	unseenSince map[types.UID]time.Time

	test testHooks
}

var _ instance.Store = (*Store)(nil)

// ClientQPS and ClientBurst are the rate limits of a bridge's client of
// the API server (rest.Config.QPS and Burst; client-go's defaults are 5
// and 10). A node's first discovery of a pool of 5,000 new devices is
// 5,000 creations and a Presence: 1,000 s of client-go's rate limiter,
// 100 s of this one, which is within the two minutes an unseen Instance
// is kept even were its Presence not written first. The burst lets a
// burst of claims (a Deployment's pods starting together) through
// without a wait. bridge/SCALING.md has the start-up measured.
const (
	ClientQPS   = 50
	ClientBurst = 100
)

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
func New(ctx context.Context, client dynamic.Interface, namespace string, scope Scope) (*Store, error) {
	s, err := Start(ctx, client, namespace, scope)
	if err != nil {
		return nil, err
	}
	return s, s.Synced(ctx)
}

// Start returns a Store of the Instances in namespace and, with AllPools,
// starts its informer; informers run until ctx ends. StartConfig also
// follows the informers' watches.
func Start(ctx context.Context, client dynamic.Interface, namespace string, scope Scope) (*Store, error) {
	s := makeStore(client, namespace, scope)
	return s, s.start(ctx)
}

func makeStore(client dynamic.Interface, namespace string, scope Scope) *Store {
	return &Store{
		dynamic: client, client: client.Resource(Resource).Namespace(namespace), namespace: namespace,
		presenceClient: client.Resource(PresenceResource).Namespace(namespace),
		scope:          scope, backoff: defaultBackoff(), orphanAfter: DefaultOrphanAfter,
		presences: map[string]presence{}, unseenSince: map[types.UID]time.Time{},
		recent: map[string]recentWrite{}, watch: watchState{kick: make(chan struct{}, 1)},
		informers: map[string]*poolInformer{}, servers: map[string]map[string]bool{},
	}
}

// dropManagedFields is the informers' transform: an object's
// managedFields (a timestamped entry per field manager, most of an
// Instance's metadata) are never read by the Store, and every bridge
// would hold them for every Instance it watches.
func dropManagedFields(obj any) (any, error) {
	if o, ok := obj.(*unstructured.Unstructured); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// start runs resync and, with AllPools, the informer of every Instance.
func (s *Store) start(ctx context.Context) error {
	s.life = ctx
	go s.resync(ctx)
	if s.scope != AllPools {
		return nil
	}
	if err := s.followPresences(ctx); err != nil {
		return err
	}
	// Synced waits for its first list.
	_, err := s.informerOf("")
	return err
}

// Synced waits until every informer holds its first full list of
// Instances, or ctx ends: until then List would report none.
func (s *Store) Synced(ctx context.Context) error {
	informers := s.running()
	if s.presenceInformer != nil {
		informers = append(informers, s.presenceInformer)
	}
	for _, inf := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("listing %s in namespace %q: %w", Resource.GroupResource(), s.namespace, ctx.Err())
		}
	}
	return nil
}

// List implements instance.Store from the informers' caches and this
// Store's own writes: what it wrote, it reads back at once. With
// ServedPools it lists the served pools' Instances; its error wraps
// ErrNotListed while one of them has not been listed yet.
func (s *Store) List(context.Context) ([]instance.Instance, error) {
	out, err := s.list()
	withSeers(out, s.seers())
	return out, errors.Join(err, s.notListed())
}

// list is List as the objects say, without the nodes of the Presences
// (Nodes are only those an older bridge wrote into an Instance) and
// without the pools not listed yet: for Observe, which reads only the
// pool it has just listed, and rewrites the objects.
func (s *Store) list() ([]instance.Instance, error) {
	var out []instance.Instance
	var errs []error
	for _, obj := range s.objects() {
		in, err := toInstance(obj)
		switch {
		case err != nil:
			errs = append(errs, err)
		case s.serves(in.Config):
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// cached returns the newest copy of the named Instance this Store knows
// of without asking the API server, or nil.
func (s *Store) cached(name string) (*instance.Instance, error) {
	obj, err := s.newest(name)
	if obj == nil || err != nil {
		return nil, err
	}
	in, err := toInstance(obj)
	return &in, err
}

// newest is the newest object of the named Instance this Store knows of:
// its own recent write or an informer's copy; nil when it knows of none,
// or the newer says it is gone.
func (s *Store) newest(name string) (*unstructured.Unstructured, error) {
	// The write first, as in objects: see recentWrites.
	s.mu.Lock()
	w, had := s.recent[name]
	s.mu.Unlock()
	var cached *unstructured.Unstructured
	for _, inf := range s.running() {
		item, _, err := inf.GetStore().GetByKey(s.key(name))
		if err != nil {
			return nil, err
		}
		if obj, ok := item.(*unstructured.Unstructured); ok && !isStub(obj) {
			cached = newerObject(cached, obj)
		}
	}
	return newer(cached, w, had), nil
}

// key is the informers' key of the named Instance.
func (s *Store) key(name string) string {
	if s.namespace == "" {
		return name
	}
	return s.namespace + "/" + name
}

// Get returns the named Instance as List shows it, nil when List shows
// none: for a caller that follows a few Instances and would otherwise
// convert every one of them on each change.
func (s *Store) Get(name string) (*instance.Instance, error) {
	in, err := s.cached(name)
	if in != nil {
		one := []instance.Instance{*in}
		withSeers(one, map[string][]string{name: s.seersOf(name)})
		in = &one[0]
	}
	return in, err
}

// Changes implements instance.Store: every event of the informer, made
// here or by another node, reaches every receiver.
func (s *Store) Changes() (<-chan struct{}, func()) { return s.changes.Subscribe() }

func (s *Store) notify() { s.changes.Notify() }

// Stats are the API writes the Store made, how many of them conflicted,
// how many lists it made itself while an informer lacked a watch, and how
// many events its informers received.
type Stats struct{ Writes, Conflicts, Relists, Events int }

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Writes: s.writes, Conflicts: s.conflicts, Relists: s.relists, Events: s.events}
}

func (s *Store) count(conflict bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if conflict {
		s.conflicts++
	}
}

package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/cdiexec/cdi/bridge/instance"
)

// LabelPool is the label every Instance carries with its pool (its
// configuration, LabelValue of it), so that a bridge can watch only the
// pools it serves.
const LabelPool = Group + "/pool"

// Scope says which Instances a Store follows.
type Scope int

const (
	// AllPools follows every Instance of the namespace: for the one
	// bridge that clears departed nodes, for tools and tests.
	AllPools Scope = iota
	// ServedPools follows only the pools the Store's Observe calls
	// report seen (and not withdrawn since): a node's bridge, whose cost
	// then grows with what it serves, not with the cluster. Before its
	// first Observe it follows none.
	ServedPools
)

// poolInformer is the informer of one pool's Instances (of every pool,
// with AllPools) and how to stop it.
type poolInformer struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// running returns the informers running now, in pool order.
func (s *Store) running() []cache.SharedIndexInformer {
	s.mu.Lock()
	defer s.mu.Unlock()
	pools := make([]string, 0, len(s.informers))
	for p := range s.informers {
		pools = append(pools, p)
	}
	sort.Strings(pools)
	out := make([]cache.SharedIndexInformer, 0, len(pools))
	for _, p := range pools {
		out = append(out, s.informers[p].informer)
	}
	return out
}

// followWait bounds follow's wait for a pool's first list: with the API
// server unreachable, a discovery must still reach the kubelet. Until
// the list comes, List says the pool is not listed yet.
const followWait = 10 * time.Second

// ErrNotListed is wrapped by List's error while the first list of a
// followed pool has not come, with an instance.IncompleteError naming
// the pools: what List returns lacks those pools' Instances, and a caller
// that would act on their absence (releasing the slots nobody seems to
// claim) must not.
var ErrNotListed = errors.New("a pool's Instances are not listed yet")

// follow starts the informer of pool's Instances ("" every pool) unless
// it runs, and waits, as long as ctx lets it and at most followWait, for
// its first list: an Observe that starts serving a pool goes on with the
// pool's Instances in view.
func (s *Store) follow(ctx context.Context, pool string) error {
	ctx, cancel := context.WithTimeout(ctx, followWait)
	defer cancel()
	pi, err := s.informerOf(pool)
	if err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), pi.informer.HasSynced) {
		return fmt.Errorf("pool %q: %w: %w", pool, ErrNotListed, ctx.Err())
	}
	return nil
}

// informerOf returns the informer of pool's Instances, started now
// unless it runs.
func (s *Store) informerOf(pool string) (*poolInformer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi, ok := s.informers[pool]; ok {
		return pi, nil
	}
	pi, err := s.newInformer(pool)
	if err != nil {
		return nil, err
	}
	s.informers[pool] = pi
	s.followGen++
	if old, ok := s.informers[unlabelledPool]; ok && pool != unlabelledPool {
		// Its copies of pool's Instances are stubs (notServedStub):
		// a new informer lists them whole.
		old.stop()
		if s.informers[unlabelledPool], err = s.newInformer(unlabelledPool); err != nil {
			delete(s.informers, unlabelledPool)
			return nil, err
		}
	}
	return pi, nil
}

// notListed returns an error wrapping ErrNotListed and an
// instance.IncompleteError that names the followed pools whose first list
// has not come, nil when none. While the unlabelled Instances (or, with
// AllPools, all) are not listed, every pool may lack some.
func (s *Store) notListed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pools []string
	all := false
	for p, pi := range s.informers {
		if !pi.informer.HasSynced() {
			pools = append(pools, p)
			all = all || p == unlabelledPool || p == ""
		}
	}
	if len(pools) == 0 {
		return nil
	}
	if all {
		pools = pools[:0]
		for p := range s.informers {
			if p != unlabelledPool && p != "" {
				pools = append(pools, p)
			}
		}
	}
	sort.Strings(pools)
	return &instance.IncompleteError{Pools: pools, Err: ErrNotListed}
}

// newInformer starts an informer of pool's Instances ("" every pool),
// running until the Store's life ends or it is stopped.
func (s *Store) newInformer(pool string) (*poolInformer, error) {
	selector := func(o *metav1.ListOptions) { o.LabelSelector = poolSelector(pool) }
	informer := dynamicinformer.NewFilteredDynamicInformer(s.dynamic, Resource, s.namespace, 0, cache.Indexers{}, selector).Informer()
	event := func(obj any, deleted bool) {
		s.heard()
		s.caughtUp(obj, deleted)
		if deleted {
			if name, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				_, name, _ = cache.SplitMetaNamespaceKey(name)
				s.lostInstance(name)
			}
		}
		s.notify()
	}
	transform := dropManagedFields
	if pool == unlabelledPool {
		transform = s.notServedStub
	}
	if err := informer.SetTransform(transform); err != nil {
		return nil, err
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { event(obj, false) }, UpdateFunc: func(_, obj any) { event(obj, false) },
		DeleteFunc: func(obj any) { event(obj, true) },
	}); err != nil {
		return nil, err
	}
	if err := informer.SetWatchErrorHandler(s.lostWatch); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(s.life)
	go informer.Run(ctx.Done())
	return &poolInformer{informer: informer, stop: stop}, nil
}

func (s *Store) heard() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events++
}

// serve records whether node serves pool (its drop-ins report it).
func (s *Store) serve(pool, node string, serves bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !serves {
		delete(s.servers[pool], node)
		return
	}
	if s.servers[pool] == nil {
		s.servers[pool] = map[string]bool{}
	}
	s.servers[pool][node] = true
}

// retire stops following pool, which node's drop-ins no longer report,
// unless another node of this Store (the one bridge's, but a simulation
// runs several) still serves it, or node holds a slot in one of its
// Instances: those claims are released through this Store when their
// containers end, and must stay in view until then. Such a pool is
// followed until the bridge restarts. It waits for the claims under way
// (Store.following), so that the view it reads holds every claim made.
func (s *Store) retire(pool, node string) {
	if s.scope != ServedPools {
		return
	}
	s.following.Lock()
	defer s.following.Unlock()
	if s.served(pool) {
		return
	}
	all, _ := s.List(context.Background())
	for _, in := range all {
		if in.Config == pool && slices.Contains(in.NodeNames(), node) {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi, ok := s.informers[pool]; ok {
		pi.stop()
		delete(s.informers, pool)
		s.followGen++
	}
	// No informer will catch up with the pool's writes any more.
	for name, w := range s.recent {
		if w.obj != nil && w.obj.GetLabels()[LabelPool] == LabelValue(pool) {
			delete(s.recent, name)
		}
	}
}

// served reports whether a node of this Store serves pool.
func (s *Store) served(pool string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.servers[pool]) > 0
}

// unlabelledPool is the informers' key, never a pool's name, of the
// Instances without a pool label: those a bridge of the release before
// the labels wrote, which a node's Store follows whatever their pool
// (List shows those of its pools), so that an older bridge's write, which
// drops the label, does not take an Instance out of view. Once every
// bridge is of this release, there are none.
const unlabelledPool = "!"

// annotationStub marks, in an informer's cache only, an object
// notServedStub cut down.
const annotationStub = Group + "/stub"

// notServedStub is the transform of the informer of the unlabelled
// Instances: the copy of one in a pool this Store does not follow is cut
// down to its name, version and pool. During a rollout from the release
// before the labels every Instance of the cluster is unlabelled, and a
// node's bridge would hold them all in full; it holds its own pools'. A
// pool followed later has the informer started again (informerOf).
func (s *Store) notServedStub(obj any) (any, error) {
	o, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	o.SetManagedFields(nil)
	pool, _, _ := unstructured.NestedString(o.Object, "spec", "configurationName")
	if s.serves(pool) {
		return o, nil
	}
	stub := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"configurationName": pool}}}
	stub.SetAPIVersion(o.GetAPIVersion())
	stub.SetKind(o.GetKind())
	stub.SetName(o.GetName())
	stub.SetNamespace(o.GetNamespace())
	stub.SetUID(o.GetUID())
	stub.SetResourceVersion(o.GetResourceVersion())
	stub.SetAnnotations(map[string]string{annotationStub: ""})
	return stub, nil
}

// isStub reports whether obj is a copy notServedStub cut down.
func isStub(obj *unstructured.Unstructured) bool {
	_, ok := obj.GetAnnotations()[annotationStub]
	return ok
}

// poolSelector is the label selector of pool's Instances: every Instance
// for "", the unlabelled for unlabelledPool.
func poolSelector(pool string) string {
	switch pool {
	case "":
		return ""
	case unlabelledPool:
		return "!" + LabelPool
	}
	return LabelPool + "=" + LabelValue(pool)
}

// followedSelector is one label selector of the Instances a Store
// follows, parsed to tell which objects it selects.
type followedSelector struct {
	selector string
	selects  labels.Selector
}

// followedSelectors are the label selectors of every Instance the Store
// follows, for its own lists: one, "", for every pool; none when it
// follows none. gen changes whenever they do.
func (s *Store) followedSelectors() (_ []followedSelector, gen uint64, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var selectors []string
	if s.scope == AllPools {
		selectors = []string{""}
	} else {
		values := make([]string, 0, len(s.informers))
		for p := range s.informers {
			if p != unlabelledPool {
				values = append(values, LabelValue(p))
			}
		}
		if len(values) > 0 {
			sort.Strings(values)
			selectors = []string{LabelPool + " in (" + strings.Join(values, ",") + ")", poolSelector(unlabelledPool)}
		}
	}
	out := make([]followedSelector, 0, len(selectors))
	for _, sel := range selectors {
		parsed, err := labels.Parse(sel)
		if err != nil {
			return nil, 0, fmt.Errorf("label selector %q: %w", sel, err)
		}
		out = append(out, followedSelector{selector: sel, selects: parsed})
	}
	return out, s.followGen, nil
}

// serves reports whether the Store follows pool.
func (s *Store) serves(pool string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.informers[pool]
	return ok || s.scope == AllPools
}

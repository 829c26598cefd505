package kube

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// relistBackoff paces the lists a Store makes itself while its
// informer may lack a watch. client-go's informer retries a refused watch
// with a backoff of up to 30 s (1.3 to 58 s were seen after an API server
// restart), during which this node would be offered slots taken
// elsewhere and not slots freed elsewhere; listing in the meantime keeps
// the view current. The waits grow, 1 s then twice as long each time up
// to 8 s, each stretched by a random part of up to as much again, so that
// the bridges of every node, which all lose their watch when an API
// server restarts, neither list at the same instants nor many times
// each: about 8 lists in the first minute (twice a second before).
func relistBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 1, Cap: 8 * time.Second, Steps: math.MaxInt32}
}

// relistTimeout bounds one of those lists: a list that waits (client-go
// held the first one after a restart in its rate limiter for 5 s) is
// tried again at the next step.
const relistTimeout = time.Second

// ResyncWindow is how long after the last failed list or watch resync
// keeps listing, even once the API server accepts a watch again: an
// accepted watch can still end at once (a resourceVersion the restarted
// server no longer has), and the informer's list after that may wait out
// its backoff. It is the informer's longest backoff.
const ResyncWindow = 30 * time.Second

// StartConfig is Start with a client made from cfg, whose requests the
// Store follows: when its informer's list or watch cannot reach the API
// server the Store knows its view may fall behind (Stale), and lists the
// Instances itself, at the pace of relistBackoff, until the informer
// watches again.
// The informer itself reports nothing of a refused watch: it retries in
// silence.
func StartConfig(ctx context.Context, cfg *rest.Config, namespace string, scope Scope) (*Store, error) {
	cfg = rest.CopyConfig(cfg)
	var s *Store
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if s != nil && isCollectionGet(req) {
				s.observeWatch(req, resp, err)
			}
			return resp, err
		})
	})
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	s = makeStore(client, namespace, scope)
	return s, s.start(ctx)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// isCollectionGet reports whether req lists or watches the Instances: the
// informer's requests, and relist's.
func isCollectionGet(req *http.Request) bool {
	return req.Method == http.MethodGet && len(req.URL.Path) > len(Resource.Resource) &&
		req.URL.Path[len(req.URL.Path)-len(Resource.Resource)-1:] == "/"+Resource.Resource
}

// observeWatch follows the informer: a list or watch that fails breaks
// the Store's view; a watch that the API server accepts mends it.
func (s *Store) observeWatch(req *http.Request, resp *http.Response, err error) {
	switch {
	case err != nil:
		s.lostWatch(nil, err)
	case resp.StatusCode >= 500:
		s.lostWatch(nil, fmt.Errorf("listing instances: %s", resp.Status))
	case req.URL.Query().Get("watch") == "true" && resp.StatusCode == http.StatusOK:
		s.mu.Lock()
		s.watch.accepted, s.watch.stale = true, nil
		s.mu.Unlock()
	}
}

// staleness is since when, and why, the Store's view may be behind.
type staleness struct {
	since time.Time
	err   error
}

// watchState is the informer's watch as the Store follows it (under mu).
type watchState struct {
	// broken is set when a list or watch fails, and cleared once a watch
	// was accepted since and ResyncWindow has passed since lastFailure.
	broken      bool
	accepted    bool
	lastFailure time.Time
	// stale is set when the watch is lost, until a list answers (relist,
	// or the informer's new watch); nil while the view is current.
	stale *staleness
	// kick wakes resync.
	kick chan struct{}
}

// lostWatch marks the informer's watch lost: the Store's view may fall
// behind from now on. It is also the informer's watch error handler.
func (s *Store) lostWatch(_ *cache.Reflector, err error) {
	s.mu.Lock()
	s.watch.broken, s.watch.accepted, s.watch.lastFailure = true, false, time.Now()
	if s.watch.stale == nil {
		s.watch.stale = &staleness{since: time.Now()}
	}
	s.watch.stale.err = err
	s.mu.Unlock()
	select {
	case s.watch.kick <- struct{}{}:
	default:
	}
}

// Stale reports since when the Store's view may be behind the API server,
// and why: the informer lost its watch and no list has answered since.
// The zero time means the view is current.
func (s *Store) Stale() (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch.stale == nil {
		return time.Time{}, nil
	}
	return s.watch.stale.since, s.watch.stale.err
}

// resync, while the informer may lack a watch, lists the Instances at
// the pace of relistBackoff (the first list after a random part of its
// first wait) and takes what the API returns as newer than the
// informer's copies (as it takes this Store's own writes), until the
// informer watches again and ResyncWindow has passed since the last
// failure.
func (s *Store) resync(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.watch.kick:
		}
		backoff := relistBackoff()
		wait := time.Duration(rand.Int64N(int64(backoff.Duration)))
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			if !s.watchBroken() {
				break
			}
			s.relist(ctx)
			wait = backoff.Step()
		}
	}
}

func (s *Store) watchBroken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch.broken && s.watch.accepted && time.Since(s.watch.lastFailure) > ResyncWindow {
		s.watch.broken = false
	}
	return s.watch.broken
}

// relist lists the Instances the Store follows from the API server, and
// takes what each list says as known as of its resourceVersion: a listed
// object newer than the informer's copy is remembered as the newest, and
// a cached object a list lacks is remembered as deleted, but only where
// that list selects it and is at least as new as the cached copy. The
// lists of several selectors come at different resourceVersions: one
// taken before an object was created says nothing of it. Nothing is
// taken if the informers changed meanwhile.
func (s *Store) relist(ctx context.Context) {
	selectors, gen, err := s.followedSelectors()
	if err != nil || len(selectors) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, relistTimeout)
	defer cancel()
	s.mu.Lock()
	s.relists++
	s.mu.Unlock()
	lists := make([]selectorList, 0, len(selectors))
	for _, sel := range selectors {
		list, err := s.client.List(ctx, metav1.ListOptions{LabelSelector: sel.selector})
		if err != nil {
			return // still unreachable: stay stale
		}
		rv, ok := parseRV(list.GetResourceVersion())
		if !ok {
			return
		}
		lists = append(lists, selectorList{sel: sel, rv: rv, items: list.Items})
		hook(s.test.relisted, sel.selector)
	}
	known := s.relisted(lists)
	s.mu.Lock()
	if s.followGen == gen {
		for name, w := range known {
			s.rememberLocked(name, w)
		}
		s.watch.stale = nil
	}
	s.mu.Unlock()
	s.notify()
}

// selectorList is one of relist's lists.
type selectorList struct {
	sel   followedSelector
	rv    uint64
	items []unstructured.Unstructured
}

// relisted is what lists say that the informers do not hold yet, by
// name: a listed object newer than the informer's copy (or than what the
// Store remembers: a deletion an earlier list recorded), and the deletion
// of a cached object that a list selecting it, at least as new as the
// copy, lacks.
func (s *Store) relisted(lists []selectorList) map[string]recentWrite {
	recent := s.recentWrites()
	cached := map[string]*unstructured.Unstructured{}
	for _, inf := range s.running() {
		for _, item := range inf.GetStore().List() {
			if obj, ok := item.(*unstructured.Unstructured); ok {
				cached[obj.GetName()] = newerObject(cached[obj.GetName()], obj)
			}
		}
	}
	out := map[string]recentWrite{}
	put := func(name string, w recentWrite) {
		if old, had := out[name]; !had || w.asOf > old.asOf {
			out[name] = w
		}
	}
	for _, l := range lists {
		listed := make(map[string]bool, len(l.items))
		for i := range l.items {
			obj := &l.items[i]
			listed[obj.GetName()] = true
			rv, _ := resourceVersion(obj)
			_, remembered := recent[obj.GetName()]
			if c := cached[obj.GetName()]; c == nil || rvOf(c) < rv || remembered {
				put(obj.GetName(), recentWrite{obj: obj, rv: rv, asOf: l.rv})
			}
		}
		for name, c := range cached {
			if !listed[name] && l.sel.selects.Matches(labels.Set(c.GetLabels())) && rvOf(c) <= l.rv {
				put(name, recentWrite{rv: l.rv + 1, asOf: l.rv})
			}
		}
	}
	return out
}

// rvOf is obj's resourceVersion, 0 when it is not an integer.
func rvOf(obj *unstructured.Unstructured) uint64 {
	rv, _ := resourceVersion(obj)
	return rv
}

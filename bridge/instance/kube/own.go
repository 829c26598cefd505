package kube

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/cdiexec/cdi/bridge/instance"
)

// DefaultOrphanAfter is how long after a node's first Observe through a
// Store of ServedPools that Store deletes the node's Presences of the
// pools no Observe has named since it started: the drop-ins removed
// while the bridge was down. Every front end reports each pool it serves
// at the bridge's first discovery, seconds after the start.
const DefaultOrphanAfter = time.Minute

// ownPresences is what a Store of ServedPools keeps true of the
// Presences of the nodes it observes for (a bridge's one node; a
// simulation's several), under Store.mu.
type ownPresences struct {
	// want is, by Presence name, what the last Observe of its node and
	// pool said: the devices, nil when the pool was withdrawn.
	want map[string]wantedPresence
	// nodes are the nodes observed for, by name.
	nodes map[string]*ownNode
	// lost are the names of Instances a wanted Presence lists that the
	// informers saw deleted, to create again.
	lost map[string]bool
	// kick wakes keep.
	kick chan struct{}
}

type wantedPresence struct {
	node, pool string
	devices    []string
	// seen are the devices' descriptions, by Instance name: an Instance
	// the Presence lists that is deleted is created again from them.
	seen map[string]instance.Instance
}

// ownNode is one node's informer of its own Presences (by LabelNode: a
// few objects, one per pool), and when the Store first observed for it.
type ownNode struct {
	informer cache.SharedIndexInformer
	since    time.Time
}

// keepBackoff paces keep's retries after a write failed: 1 s, doubling
// to 30 s, jittered.
func keepBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: 30 * time.Second, Steps: 1 << 30}
}

// observePresence records, with ServedPools, that node's Presence of
// pool is to list devices (nil: to be deleted) from now on, and writes
// it; it returns what the Presence listed before. Writes of a Store's
// own Presences are serialized, so that keep never undoes what Observe
// has just written.
func (s *Store) observePresence(ctx context.Context, node, pool string, devices []string, seen []instance.Instance) ([]string, error) {
	s.presenceMu.Lock()
	defer s.presenceMu.Unlock()
	if s.scope == ServedPools {
		if err := s.wantPresence(wantedPresence{node: node, pool: pool, devices: devices, seen: described(devices, seen)}); err != nil {
			return nil, err
		}
	}
	return s.writePresence(ctx, node, pool, devices)
}

// described are the descriptions in seen of the devices listed, by name.
func described(listed []string, seen []instance.Instance) map[string]instance.Instance {
	out := make(map[string]instance.Instance, len(listed))
	for _, in := range seen {
		if _, ok := slices.BinarySearch(listed, in.Name); ok {
			out[in.Name] = in
		}
	}
	return out
}

// wantPresence records what node's Presence of pool is to list and wakes
// keep, starting it, and the informer of node's Presences, unless they
// run.
func (s *Store) wantPresence(w wantedPresence) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own.want == nil {
		s.own = ownPresences{want: map[string]wantedPresence{}, nodes: map[string]*ownNode{}, lost: map[string]bool{},
			kick: make(chan struct{}, 1)}
		go s.keep(s.life)
	}
	node := w.node
	s.own.want[PresenceName(node, w.pool)] = w
	if _, ok := s.own.nodes[node]; !ok {
		informer, err := s.followOwn(node)
		if err != nil {
			return err
		}
		s.own.nodes[node] = &ownNode{informer: informer, since: time.Now()}
	}
	s.kickKeep()
	return nil
}

// kickKeep wakes keep, which then looks at every Presence it keeps.
func (s *Store) kickKeep() {
	select {
	case s.own.kick <- struct{}{}:
	default:
	}
}

// followOwn starts the informer of node's Presences, running until the
// Store's life ends: what it holds is what this Store knows of them, and
// each of its events wakes keep.
func (s *Store) followOwn(node string) (cache.SharedIndexInformer, error) {
	informer, err := s.presenceInformerOf(LabelNode+"="+LabelValue(node), func(p presence) bool { return p.node == node }, s.kickKeep)
	if err != nil {
		return nil, err
	}
	go informer.Run(s.life.Done())
	go func() {
		// keep waits for the first list before it acts for node.
		if cache.WaitForCacheSync(s.life.Done(), informer.HasSynced) {
			s.kickKeep()
		}
	}()
	return informer, nil
}

// keep keeps the Presences of the nodes this Store observes for as their
// last Observe said, until ctx ends: it writes again one deleted or
// changed elsewhere (kubectl, a lost response, the departed-node sweep
// of a node that came back), retries a withdrawal that failed, and
// deletes those of pools no Observe has named since the Store started,
// DefaultOrphanAfter after the node's first Observe. It looks whenever
// the informers or Observe say something changed, and again after a
// failure or when an orphan falls due.
func (s *Store) keep(ctx context.Context) {
	backoff := keepBackoff()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.own.kick:
		case <-timer.C:
		}
		next, err := s.keepOnce(ctx, time.Now())
		if err != nil {
			next = backoff.Step()
		} else {
			backoff = keepBackoff()
		}
		if next <= 0 {
			next = time.Hour
		}
		timer.Reset(next)
	}
}

// keepOnce settles every Presence kept, then creates again the
// Instances they list that were deleted; it returns how long until an
// orphan falls due, 0 for none.
func (s *Store) keepOnce(ctx context.Context, now time.Time) (time.Duration, error) {
	var errs []error
	var next time.Duration
	for _, name := range s.kept() {
		wait, err := s.settle(ctx, name, now)
		errs = append(errs, err)
		if wait > 0 && (next == 0 || wait < next) {
			next = wait
		}
	}
	for _, name := range s.lostInstances() {
		errs = append(errs, s.restore(ctx, name))
	}
	return next, errors.Join(errs...)
}

// lostInstance is told by the informers that the named Instance was
// deleted, or by Observe that writing it failed: if a Presence this Store
// keeps lists it, keep creates it again should it be missing. The elected
// bridge deletes only what no Presence lists, but the Presence may have
// been deleted meanwhile (kubectl, the departed-node sweep of a node that
// came back), and its deletion may fall within Observe (PruneUnseen says
// when).
func (s *Store) lostInstance(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own.want == nil {
		return
	}
	for _, w := range s.own.want {
		if _, ok := w.seen[name]; ok {
			s.own.lost[name] = true
			s.kickKeep()
			return
		}
	}
}

// lostInstances are the names lostInstance was told of, sorted.
func (s *Store) lostInstances() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.own.lost))
	for name := range s.own.lost {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// restore creates the named Instance again if a Presence this Store
// keeps still lists it and it is missing; it forgets the name once done.
func (s *Store) restore(ctx context.Context, name string) error {
	s.mu.Lock()
	var want instance.Instance
	var node string
	for _, w := range s.own.want {
		if in, ok := w.seen[name]; ok {
			want, node = in, w.node
			break
		}
	}
	s.mu.Unlock()
	var err error
	if node != "" {
		if obj, _ := s.newest(name); obj == nil {
			err = s.describe(ctx, node, want, readPlan{})
		}
	}
	if err == nil {
		s.mu.Lock()
		delete(s.own.lost, name)
		s.mu.Unlock()
	}
	return err
}

// kept are the names of the Presences wanted and of those known, sorted.
func (s *Store) kept() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.own.want)+len(s.presences))
	for name := range s.own.want {
		names = append(names, name)
	}
	for name := range s.presences {
		names = append(names, name)
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// settle writes the named Presence as it should be, if it is not: as
// wanted, or deleted when it is an orphan due. For an orphan not yet due
// it returns how long until it is.
func (s *Store) settle(ctx context.Context, name string, now time.Time) (time.Duration, error) {
	s.presenceMu.Lock()
	defer s.presenceMu.Unlock()
	s.mu.Lock()
	w, wanted := s.own.want[name]
	p, have := s.presences[name]
	node := w.node
	if !wanted {
		node = p.node
	}
	n := s.own.nodes[node]
	s.mu.Unlock()
	switch {
	case n == nil || !n.informer.HasSynced():
		// Not one of this Store's nodes, or not known yet: keep is
		// woken again once its informer has the first list.
		return 0, nil
	case wanted && settled(w, p, have):
		return 0, nil
	case wanted:
		_, err := s.writePresence(ctx, w.node, w.pool, w.devices)
		return 0, err
	case !have:
		return 0, nil
	case now.Sub(n.since) < s.orphanAfter:
		return n.since.Add(s.orphanAfter).Sub(now), nil
	}
	_, err := s.writePresence(ctx, p.node, p.pool, nil)
	return 0, err
}

// settled reports whether the Presence, p when have, is as w wants it.
func settled(w wantedPresence, p presence, have bool) bool {
	if w.devices == nil {
		return !have
	}
	return have && slices.Equal(p.devices, w.devices)
}

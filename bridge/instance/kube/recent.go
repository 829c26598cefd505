package kube

import (
	"maps"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// recentWrite is an Instance as this Store last wrote it, kept until the
// informer's copy is as new: the node's next decision (a Configuration-
// level Allocate reusing a vdev's claim, the list it pushes to the
// kubelet) must see the claim it just made, and the watch event that
// brings it may be milliseconds behind.
type recentWrite struct {
	// obj is the object the API server returned; nil for a deletion.
	obj *unstructured.Unstructured
	// rv is obj's resourceVersion; for a deletion, one past the deleted
	// object's: the informer's copy of that object stays hidden, while
	// the watch's deletion event, which carries the deletion's own later
	// resourceVersion, or a re-created object catches up with it.
	rv uint64
	// asOf is the resourceVersion at which the API server said so: the
	// write's own, or that of the list that showed obj, or lacked it.
	// What is known as of a later resourceVersion replaces it.
	asOf uint64
}

// resourceVersion reads an object's resourceVersion as the integer etcd
// makes it. The API calls it opaque, but ordering writes of one object by
// it is what client-go's own MutationCache does; ok is false for a value
// that is not an integer, and such a write is simply not remembered.
func resourceVersion(obj *unstructured.Unstructured) (rv uint64, ok bool) {
	return parseRV(obj.GetResourceVersion())
}

func parseRV(v string) (uint64, bool) {
	rv, err := strconv.ParseUint(v, 10, 64)
	return rv, err == nil
}

// remember records a write this Store made: obj as the server returned it,
// or, when obj is nil, the deletion of name at resourceVersion deletedRV.
func (s *Store) remember(name string, obj *unstructured.Unstructured, deletedRV string) {
	w := recentWrite{obj: obj}
	var ok bool
	if obj != nil {
		w.rv, ok = resourceVersion(obj)
	} else {
		w.rv, ok = parseRV(deletedRV)
		w.rv++
	}
	if !ok {
		return
	}
	w.asOf = w.rv
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rememberLocked(name, w)
}

// rememberLocked records w unless what the Store knows of name is as of
// a later resourceVersion. The caller holds s.mu.
func (s *Store) rememberLocked(name string, w recentWrite) {
	if old, had := s.recent[name]; !had || w.asOf > old.asOf || (w.asOf == old.asOf && w.rv > old.rv) {
		s.recent[name] = w
	}
}

// caughtUp forgets the recent write of an object the informer now holds
// a copy of at least as new, and after a deletion event (deleted) a
// recorded deletion, whatever its version: the informer holds nothing
// then either. It is the informer's event handler, before the receivers
// of Changes are told.
func (s *Store) caughtUp(item any, deleted bool) {
	if tomb, ok := item.(cache.DeletedFinalStateUnknown); ok {
		item = tomb.Obj
	}
	obj, ok := item.(*unstructured.Unstructured)
	if !ok {
		return
	}
	rv, ok := resourceVersion(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, had := s.recent[obj.GetName()]; had && (!ok || rv >= w.rv || (deleted && w.obj == nil)) {
		delete(s.recent, obj.GetName())
	}
}

// recentWrites returns a copy of the writes the informer has not caught
// up with. A reader takes it before it reads the informer's cache: the
// informer updates its cache before caughtUp forgets a write, so a write
// missing from the copy is already in what the cache then shows, and a
// copy taken after the cache was read could lack a write the cache read
// did not yet hold.
func (s *Store) recentWrites() map[string]recentWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.recent)
}

// newer returns the newer of the informer's copy of an object (cached,
// nil when it has none) and this Store's recent write of it (w, when had);
// nil when the newer says the object is gone.
func newer(cached *unstructured.Unstructured, w recentWrite, had bool) *unstructured.Unstructured {
	if !had {
		return cached
	}
	if cached != nil {
		if rv, ok := resourceVersion(cached); !ok || rv >= w.rv {
			return cached
		}
	}
	return w.obj
}

// objects returns every Instance object, each the newest this Store
// knows of.
func (s *Store) objects() []*unstructured.Unstructured {
	recent := s.recentWrites()
	names := map[string]*unstructured.Unstructured{}
	for _, inf := range s.running() {
		for _, item := range inf.GetStore().List() {
			if obj, ok := item.(*unstructured.Unstructured); ok && !isStub(obj) {
				names[obj.GetName()] = newerObject(names[obj.GetName()], obj)
			}
		}
	}
	for name := range recent {
		if _, ok := names[name]; !ok {
			names[name] = nil
		}
	}
	var out []*unstructured.Unstructured
	for name, cached := range names {
		w, had := recent[name]
		if obj := newer(cached, w, had); obj != nil {
			out = append(out, obj)
		}
	}
	return out
}

// newerObject is the newer of two informers' copies of one object (a or
// b may be nil): an Instance whose label an older bridge dropped moves
// from its pool's informer to the unlabelled one, and for a moment both
// may hold it.
func newerObject(a, b *unstructured.Unstructured) *unstructured.Unstructured {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	ra, _ := resourceVersion(a)
	if rb, _ := resourceVersion(b); rb > ra {
		return b
	}
	return a
}

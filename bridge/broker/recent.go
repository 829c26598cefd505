package broker

import (
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// recentTTL is how long a write of the controller's own is remembered:
// far longer than an informer lags behind the API server.
const recentTTL = 2 * time.Minute

// recentWrites are the controller's writes that its informers may not
// show yet, so that it does not make an object twice (the second create
// would fail, and count as a write) or delete one twice. Without it, a
// Broker looked at again before the informer has the Job just made for
// a device would want that Job made again.
type recentWrites struct {
	mu sync.Mutex
	// written are the objects as the API server returned them after a
	// create or an update, by kind/namespace/name.
	written map[string]recentObject
	// deleted are the UIDs of the objects deleted.
	deleted map[types.UID]time.Time
}

type recentObject struct {
	obj metav1.Object
	at  time.Time
}

func newRecentWrites() *recentWrites {
	return &recentWrites{written: map[string]recentObject{}, deleted: map[types.UID]time.Time{}}
}

func recentKey(kind string, obj metav1.Object) string {
	return kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
}

// wrote remembers obj, the API server's answer to a create or update.
func (w *recentWrites) wrote(kind string, obj metav1.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written[recentKey(kind, obj)] = recentObject{obj: obj, at: time.Now()}
}

// removed remembers that obj was deleted.
func (w *recentWrites) removed(kind string, obj metav1.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.written, recentKey(kind, obj))
	w.deleted[obj.GetUID()] = time.Now()
}

// forget drops the write remembered of obj, whose informer lost it: it
// is gone, or no longer carries the label the informer selects by. A
// remembered write would show it as it was.
func (w *recentWrites) forget(kind string, obj metav1.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.written[recentKey(kind, obj)]; ok && r.obj.GetUID() == obj.GetUID() {
		delete(w.written, recentKey(kind, obj))
	}
}

// view is the informer's objects of kind in ns (backing), as the
// controller's recent writes leave them: a deleted one left out, a newer
// version written put in its place, one made and not seen yet added.
func (w *recentWrites) view(kind, ns string, backing []any) []metav1.Object {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expire(time.Now())
	out := make([]metav1.Object, 0, len(backing))
	shown := map[string]bool{}
	for _, obj := range backing {
		b, ok := obj.(metav1.Object)
		if !ok {
			continue
		}
		if _, gone := w.deleted[b.GetUID()]; gone {
			continue
		}
		key := recentKey(kind, b)
		shown[key] = true
		if r, ok := w.written[key]; ok && r.obj.GetUID() == b.GetUID() && newer(r.obj, b) {
			out = append(out, r.obj)
			continue
		} else if ok {
			delete(w.written, key) // the informer has caught up
		}
		out = append(out, b)
	}
	for key, r := range w.written {
		if _, gone := w.deleted[r.obj.GetUID()]; !shown[key] && !gone && r.obj.GetNamespace() == ns && key == recentKey(kind, r.obj) {
			out = append(out, r.obj)
		}
	}
	return out
}

// expire forgets what is older than recentTTL.
func (w *recentWrites) expire(now time.Time) {
	for key, r := range w.written {
		if now.Sub(r.at) > recentTTL {
			delete(w.written, key)
		}
	}
	for uid, at := range w.deleted {
		if now.Sub(at) > recentTTL {
			delete(w.deleted, uid)
		}
	}
}

// newer reports whether a's resourceVersion is after b's. They are
// etcd's revisions, integers; if either is not, b (the informer's) wins.
func newer(a, b metav1.Object) bool {
	ra, errA := strconv.ParseUint(a.GetResourceVersion(), 10, 64)
	rb, errB := strconv.ParseUint(b.GetResourceVersion(), 10, 64)
	return errA == nil && errB == nil && ra > rb
}

package broker

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// goneClock remembers, by workload UID, when the controller first found
// the workload's device gone, until the workload's own record of it
// (AnnotationGoneSince) is written. A patch of that record that fails
// (an admission policy refuses it, the API server is away) must not
// start the grace anew at every look, or the workload would never go.
// The record on the workload is what outlives the controller.
type goneClock struct {
	mu    sync.Mutex
	first map[types.UID]time.Time
}

func newGoneClock() *goneClock { return &goneClock{first: map[types.UID]time.Time{}} }

// since is when the device of the workload of uid was first found gone:
// now, if it was not before.
func (c *goneClock) since(uid types.UID, now time.Time) time.Time {
	if c == nil {
		return now
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.first[uid]; ok {
		return t
	}
	c.first[uid] = now
	return now
}

// forget drops uid: its device is back, its record written, or it is gone.
func (c *goneClock) forget(uid types.UID) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.first, uid)
}

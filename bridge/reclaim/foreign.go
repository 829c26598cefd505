package reclaim

import (
	"time"

	"github.com/cdiexec/cdi/spec"
)

// Foreign keeps track of the allocations of one plugin state (a drop-in)
// that are not its front end's own: another front end's, made before a
// pool moved between the device plugins and DRA under running pods, or
// another caller's. Such an allocation is kept while a container holds
// it, and for a grace after it was last seen held (or, never seen held,
// first seen): the kubelet may hide what its containers hold for a moment
// after it restarts. The zero value keeps nothing past the grace of 0.
type Foreign struct {
	// Grace is how long an allocation no container holds is kept.
	Grace time.Duration
	// unheld is, per request-id, since when no container holds it.
	unheld map[string]time.Time
}

// Sort goes over allocs, the plugin's allocations (LIST): own says which
// are the front end's own, held whether a container holds one that is
// not. It returns, of those not its own, the ones to keep, and those to
// release, as of now.
func (f *Foreign) Sort(now time.Time, allocs []spec.Allocation, own, held func(requestID string) bool) (keep, release []spec.Allocation) {
	if f.unheld == nil {
		f.unheld = map[string]time.Time{}
	}
	seen := map[string]bool{}
	for _, a := range allocs {
		if own(a.RequestID) {
			continue
		}
		seen[a.RequestID] = true
		if held(a.RequestID) {
			delete(f.unheld, a.RequestID)
			keep = append(keep, a)
			continue
		}
		since, ok := f.unheld[a.RequestID]
		if !ok {
			since = now
			f.unheld[a.RequestID] = now
		}
		if now.Sub(since) < f.Grace {
			keep = append(keep, a)
		} else {
			release = append(release, a)
		}
	}
	for id := range f.unheld {
		if !seen[id] {
			delete(f.unheld, id)
		}
	}
	return keep, release
}

// Devices are the inventory ids of the devices allocs hold, by the units
// their ADDs took.
func Devices(allocs []spec.Allocation) map[string]bool {
	out := map[string]bool{}
	for _, a := range allocs {
		for _, u := range a.Result.Units {
			out[u.Device] = true
		}
	}
	return out
}

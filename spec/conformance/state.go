package conformance

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"

	"github.com/cdiexec/cdi/spec"
)

// add runs ADD of request for id, with more variables if given, and
// decodes a success, whose request-id it tracks for cleanup.
func (s *subject) add(ctx context.Context, request, id string, more ...string) (*spec.AddResult, *reply, error) {
	vars := append([]string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=" + request, "CDI_REQUEST_ID=" + id}, more...)
	r := s.call(ctx, vars...)
	var res spec.AddResult
	if err := wantResult(r, s.facts.version, &res); err != nil {
		return nil, r, err
	}
	s.track(id)
	return &res, r, nil
}

// del runs DEL of id.
func (s *subject) del(ctx context.Context, id string) *reply {
	return s.call(ctx, "CDI_COMMAND=DEL", s.ver(), "CDI_REQUEST_ID="+id)
}

// list runs LIST and decodes it; allocations must be an array, never null.
func (s *subject) list(ctx context.Context) (*spec.ListResult, error) {
	r := s.call(ctx, "CDI_COMMAND=LIST", s.ver())
	var l spec.ListResult
	if err := wantResult(r, s.facts.version, &l); err != nil {
		return nil, err
	}
	if raw := r.doc["allocations"]; raw == nil || string(raw) == "null" {
		return nil, r.problem("allocations is missing or null, want an array")
	}
	return &l, nil
}

// listIDs is the request-ids LIST shows.
func (s *subject) listIDs(ctx context.Context) ([]string, error) {
	l, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(l.Allocations))
	for i, a := range l.Allocations {
		ids[i] = a.RequestID
	}
	return ids, nil
}

// parallel runs n calls at once, the i-th with vars(i), and returns their
// replies in order.
func (s *subject) parallel(ctx context.Context, n int, vars func(i int) []string) []*reply {
	replies := make([]*reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = s.call(ctx, vars(i)...)
		}()
	}
	close(start)
	wg.Wait()
	return replies
}

// sameJSON reports whether two documents hold the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// slotKey names one usage slot of a device.
type slotKey struct {
	device string
	slot   int
}

// heldSlots is every slot the allocations of l hold.
func heldSlots(l *spec.ListResult) map[slotKey]string {
	out := map[slotKey]string{}
	for _, a := range l.Allocations {
		for _, u := range a.Result.Units {
			out[slotKey{u.Device, u.Slot}] = a.RequestID
		}
	}
	return out
}

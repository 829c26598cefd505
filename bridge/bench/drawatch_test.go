package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// draWait bounds the wait for the API to show a publish.
const draWait = 2 * time.Minute

// errWatchClosed is returned when the API server ends a slice watch
// before the slices were there.
var errWatchClosed = errors.New("the ResourceSlice watch ended")

// sliceWatch is a node's ResourceSlices as a watch of the API shows
// them, from a client of its own (not counted with the publisher's).
type sliceWatch struct {
	w      watch.Interface
	slices map[string]*resourceapi.ResourceSlice
}

// nodeSelector selects the ResourceSlices of a node.
func nodeSelector(node string) string { return resourceapi.ResourceSliceSelectorNodeName + "=" + node }

// watchSlices lists node's slices and watches them from there on.
func watchSlices(ctx context.Context, client kubernetes.Interface, node string) (*sliceWatch, error) {
	api := client.ResourceV1().ResourceSlices()
	list, err := api.List(ctx, metav1.ListOptions{FieldSelector: nodeSelector(node)})
	if err != nil {
		return nil, fmt.Errorf("listing %s's ResourceSlices: %w", node, err)
	}
	w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: nodeSelector(node), ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("watching %s's ResourceSlices: %w", node, err)
	}
	s := &sliceWatch{w: w, slices: map[string]*resourceapi.ResourceSlice{}}
	for i := range list.Items {
		s.slices[list.Items[i].Name] = &list.Items[i]
	}
	return s, nil
}

func (s *sliceWatch) stop() { s.w.Stop() }

// until reads the watch until the node's slices are want, and returns
// when the event that made them so arrived.
func (s *sliceWatch) until(ctx context.Context, want []resourceslice.Slice) (time.Time, error) {
	return s.untilFunc(ctx, func() bool { return s.holds(want) }, fmt.Sprintf("the %d slices published", len(want)))
}

// untilComplete reads the watch until the pool's newest generation is
// complete with devices devices, and returns when the event that made it
// so arrived.
func (s *sliceWatch) untilComplete(ctx context.Context, devices int) (time.Time, error) {
	return s.untilFunc(ctx, func() bool { return s.complete(devices) }, fmt.Sprintf("a complete pool of %d devices", devices))
}

// untilFunc reads the watch until done, and returns when the event that
// made it so arrived; want says what done waits for, for the error.
func (s *sliceWatch) untilFunc(ctx context.Context, done func() bool, want string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, draWait)
	defer cancel()
	at := time.Now()
	for !done() {
		select {
		case <-ctx.Done():
			return at, fmt.Errorf("the API holds %s, not %s: %w", s, want, ctx.Err())
		case ev, ok := <-s.w.ResultChan():
			if !ok {
				return at, errWatchClosed
			}
			at = time.Now()
			if err := s.apply(ev); err != nil {
				return at, err
			}
		}
	}
	return at, nil
}

func (s *sliceWatch) apply(ev watch.Event) error {
	switch ev.Type {
	case watch.Added, watch.Modified:
		if slice, ok := ev.Object.(*resourceapi.ResourceSlice); ok {
			s.slices[slice.Name] = slice
		}
	case watch.Deleted:
		if slice, ok := ev.Object.(*resourceapi.ResourceSlice); ok {
			delete(s.slices, slice.Name)
		}
	case watch.Error:
		return fmt.Errorf("%w: %v", errWatchClosed, ev.Object)
	}
	return nil
}

// current are the slices of the pool's newest generation in index order:
// what a scheduler uses once there are as many as each says the pool has.
// Both publishers name a slice by its index first, at a fixed width.
func (s *sliceWatch) current() []*resourceapi.ResourceSlice {
	var gen int64
	for _, sl := range s.slices {
		gen = max(gen, sl.Spec.Pool.Generation)
	}
	var cur []*resourceapi.ResourceSlice
	for _, sl := range s.slices {
		if sl.Spec.Pool.Generation == gen {
			cur = append(cur, sl)
		}
	}
	slices.SortFunc(cur, func(a, b *resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	return cur
}

// holds reports whether the pool is complete and its slices hold want's
// devices, slice by slice.
func (s *sliceWatch) holds(want []resourceslice.Slice) bool {
	cur := s.current()
	if len(cur) != len(want) {
		return false
	}
	for i, sl := range cur {
		if sl.Spec.Pool.ResourceSliceCount != int64(len(want)) || !resourceslice.DevicesDeepEqual(sl.Spec.Devices, want[i].Devices) {
			return false
		}
	}
	return true
}

// complete reports whether the pool's newest generation has all its
// slices, holding devices devices in all.
func (s *sliceWatch) complete(devices int) bool {
	cur, n := s.current(), 0
	for _, sl := range cur {
		if sl.Spec.Pool.ResourceSliceCount != int64(len(cur)) {
			return false
		}
		n += len(sl.Spec.Devices)
	}
	return len(cur) > 0 && n == devices
}

// String says what the watch has seen, for an error.
func (s *sliceWatch) String() string {
	cur := s.current()
	devices := 0
	for _, sl := range cur {
		devices += len(sl.Spec.Devices)
	}
	return fmt.Sprintf("%d slices (%d of the newest generation, %d devices)", len(s.slices), len(cur), devices)
}

// storedSize is the size of the node's slices as the API returned them:
// JSON, as a client reads them, and protobuf, the form the apiserver
// keeps in etcd (which adds an envelope of a few dozen bytes to each).
type storedSize struct {
	slices               int
	json, proto, maxJSON int
}

func (s *sliceWatch) size() (storedSize, error) {
	var z storedSize
	for _, sl := range s.current() {
		b, err := json.Marshal(sl)
		if err != nil {
			return z, fmt.Errorf("encoding a ResourceSlice: %w", err)
		}
		z.slices++
		z.json += len(b)
		z.maxJSON = max(z.maxJSON, len(b))
		z.proto += sl.Size()
	}
	return z, nil
}

package kube

import (
	"fmt"
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/cdiexec/cdi/bridge/instance"
)

// catchingUp is an informer whose cache, each time it is read, answers
// with what it held and then catches up with the write the Store made,
// as the real informer's goroutine may do while a reader is between the
// cache and the Store's own record of its writes.
type catchingUp struct {
	cache.SharedIndexInformer
	store *laggingCache
}

func (i *catchingUp) GetStore() cache.Store { return i.store }

// HasSynced: the lagging cache stands for an informer past its first list.
func (i *catchingUp) HasSynced() bool { return true }

// laggingCache holds an Instance as it was before the Store's write
// (nothing, for a create) until its first read has been answered; then
// it takes the object the watch brings for the write (event, removed
// when deleted) and runs the Store's event handler, as the informer does.
type laggingCache struct {
	cache.Store
	s       *Store
	event   *unstructured.Unstructured
	deleted bool
}

func (c *laggingCache) List() []any {
	out := c.Store.List()
	c.catchUp()
	return out
}

func (c *laggingCache) GetByKey(key string) (any, bool, error) {
	item, ok, err := c.Store.GetByKey(key)
	c.catchUp()
	return item, ok, err
}

func (c *laggingCache) catchUp() {
	if c.event == nil {
		return
	}
	apply := c.Store.Update
	if c.deleted {
		apply = c.Store.Delete
	}
	if err := apply(c.event); err != nil {
		panic(err)
	}
	c.s.caughtUp(c.event, c.deleted)
	c.event = nil
}

// TestReadsItsWritesWhileTheInformerCatchesUp: List and Get show what
// the Store wrote even when the informer's copy arrives between the
// reader's look at the cache and at the Store's record of its writes.
// Reading the record second, they once showed the cache's older copy, or
// no Instance at all for one just created, or one just deleted.
func TestReadsItsWritesWhileTheInformerCatchesUp(t *testing.T) {
	cam := func(rv string, usage map[string]string) *unstructured.Unstructured {
		obj, err := toObject(instance.Instance{Name: "cam-1", Config: "cam", Capacity: 1, Usage: usage, Version: rv}, "ns")
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	claimed := map[string]string{"cam-1-0": "n1"}
	tests := []struct {
		name   string
		before *unstructured.Unstructured
		// write is what the Store wrote, nil for a deletion of before;
		// event is the object the watch brings for it: for a deletion,
		// the deleted object at the deletion's resourceVersion.
		write, event *unstructured.Unstructured
		// want is the usage the reads must show, nil for no Instance.
		want map[string]string
	}{
		{"updated", cam("2", nil), cam("3", claimed), cam("3", claimed), claimed},
		{"created", nil, cam("3", claimed), cam("3", claimed), claimed},
		{"deleted", cam("2", claimed), nil, cam("3", claimed), nil},
	}
	// Each read returns the usage it shows, nil when it shows no Instance.
	reads := map[string]func(*testing.T, *Store) map[string]string{
		"List": func(t *testing.T, s *Store) map[string]string {
			all, err := s.List(t.Context())
			if err != nil || len(all) > 1 {
				t.Fatalf("List = %+v, %v; want at most the one Instance", all, err)
			}
			if len(all) == 0 {
				return nil
			}
			return all[0].Usage
		},
		"Get": func(t *testing.T, s *Store) map[string]string {
			in, err := s.Get("cam-1")
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if in == nil {
				return nil
			}
			return in.Usage
		},
	}
	for _, tt := range tests {
		for readName, read := range reads {
			t.Run(tt.name+"/"+readName, func(t *testing.T) {
				client := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
					map[schema.GroupVersionResource]string{Resource: "InstanceList", PresenceResource: "PresenceList"})
				s := makeStore(client, "ns", AllPools)
				lag := &laggingCache{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), s: s, event: tt.event, deleted: tt.write == nil}
				informer := dynamicinformer.NewFilteredDynamicInformer(client, Resource, "ns", 0, cache.Indexers{}, nil).Informer()
				s.informers[""] = &poolInformer{informer: &catchingUp{SharedIndexInformer: informer, store: lag}, stop: func() {}}
				if tt.before != nil {
					if err := lag.Store.Add(tt.before); err != nil {
						t.Fatal(err)
					}
				}
				s.remember("cam-1", tt.write, "2")
				if usage := read(t, s); (usage == nil) != (tt.want == nil) || !maps.Equal(usage, tt.want) {
					t.Fatalf("%s shows %s, want %s", readName, shown(usage), shown(tt.want))
				}
			})
		}
	}
}

// shown describes a read's usage, nil being no Instance.
func shown(usage map[string]string) string {
	if usage == nil {
		return "no Instance"
	}
	return fmt.Sprintf("an Instance with usage %v", usage)
}

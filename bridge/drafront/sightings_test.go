package drafront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/spec"
)

// sightings is what store records of the shared cameras: each Instance's
// nodes, by device id.
func sightings(t *testing.T, store instance.Store) string {
	t.Helper()
	all, err := store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range all {
		got = append(got, fmt.Sprintf("%s:%v", in.DeviceID, in.Nodes))
	}
	sort.Strings(got)
	return fmt.Sprint(got)
}

// A front end that starts (a bridge restarted) reports every pool it
// serves, one whose cameras are all unhealthy included: the node's
// sighting of before must not outlive the restart, or the leader keeps
// the node in the camera's node selector and its pods' Prepare fails.
func TestObserveSharedAfterARestart(t *testing.T) {
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	gate := spec.DeviceInfo{ID: "gate", Resource: "camera", Shared: true, Healthy: true, Capacity: 2}
	before := &FrontEnd{node: "n1", store: store, log: slog.New(slog.DiscardHandler)}
	before.observeShared(context.Background(), []discovery.Pool{cameras(gate)})
	if got := sightings(t, store); got != "[gate:[n1]]" {
		t.Fatalf("before the restart the store records %s", got)
	}
	after := &FrontEnd{node: "n1", store: store, log: slog.New(slog.DiscardHandler)}
	gate.Healthy = false
	after.observeShared(context.Background(), []discovery.Pool{cameras(gate)})
	if got := sightings(t, store); got != "[]" {
		t.Errorf("after the restart, with gate unreachable, the store records %s; want no sighting", got)
	}
}

// flakyStore fails the Observe calls of the pools in fail, once each.
type flakyStore struct {
	instance.Store
	mu   sync.Mutex
	fail map[string]bool
}

func (s *flakyStore) Observe(ctx context.Context, node, config string, seen []instance.Instance) error {
	s.mu.Lock()
	fail := s.fail[config]
	delete(s.fail, config)
	s.mu.Unlock()
	if fail {
		return errors.New("the API server does not answer")
	}
	return s.Store.Observe(ctx, node, config, seen)
}

// A failed Observe is tried again, not taken as done: a camera that
// turned unreachable while the store could not be written is withdrawn
// at the next try, though nothing changed since.
func TestObserveSharedRetries(t *testing.T) {
	store := &flakyStore{Store: local.New(filepath.Join(t.TempDir(), "instances.json"))}
	f := &FrontEnd{node: "n1", store: store, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	gate := spec.DeviceInfo{ID: "gate", Resource: "camera", Shared: true, Healthy: true, Capacity: 2}
	if failed := f.observeShared(ctx, []discovery.Pool{cameras(gate)}); failed {
		t.Fatal("a store that works failed")
	}
	gate.Healthy = false
	store.mu.Lock()
	store.fail = map[string]bool{"camera-endpoint": true}
	store.mu.Unlock()
	if failed := f.observeShared(ctx, []discovery.Pool{cameras(gate)}); !failed {
		t.Error("a failed Observe is not reported, for a retry")
	}
	f.observeShared(ctx, []discovery.Pool{cameras(gate)})
	if got := sightings(t, store); got != "[]" {
		t.Errorf("after the retry the store records %s; want no sighting", got)
	}
}

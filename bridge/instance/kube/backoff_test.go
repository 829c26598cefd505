package kube

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/storetest"
)

// A writer that always conflicts (here a fake client's reactor: no real
// server conflicts on demand) gets exactly backoff.Steps attempts, then a
// clear error, even though its waits reach the Cap at once (which would
// end retry.OnError's attempts there); an error that is not a conflict is
// not retried.
func TestRetriesAreBounded(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		attempts int32
		conflict bool
	}{
		{"conflict", apierrors.NewConflict(Resource.GroupResource(), "x", errors.New("modified")), 3, true},
		{"forbidden", apierrors.NewForbidden(Resource.GroupResource(), "x", errors.New("no")), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{Resource: "InstanceList", PresenceResource: "PresenceList"})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := New(ctx, client, "ns", AllPools)
			if err != nil {
				t.Fatal(err)
			}
			s.backoff = wait.Backoff{Steps: 3, Duration: time.Millisecond, Factor: 2, Cap: time.Millisecond}
			cam := storetest.Cam("a", "lobby", 1)
			if err := s.Observe(ctx, "a", "cam", []instance.Instance{cam}); err != nil {
				t.Fatal(err)
			}
			var updates atomic.Int32
			client.PrependReactor("update", "instances", func(k8stesting.Action) (bool, runtime.Object, error) {
				updates.Add(1)
				return true, nil, tt.err
			})
			err = s.Claim(ctx, []instance.Claim{{Instance: cam.Name, Slot: instance.SlotID(cam.Name, 0), Value: "a"}})
			if err == nil || apierrors.IsConflict(err) != tt.conflict {
				t.Fatalf("Claim = %v, want the %s", err, tt.name)
			}
			if got := updates.Load(); got != tt.attempts {
				t.Errorf("%d update attempts, want %d", got, tt.attempts)
			}
			t.Log(err)
		})
	}
}

// The default waits double from 5 ms and stop growing at 500 ms, each
// jittered by up to half, and the cap ends none of the 10 attempts: 9
// waits, about two seconds in all.
func TestDefaultBackoffWaits(t *testing.T) {
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 500, 500}
	b := defaultBackoff()
	if b.Steps != len(want)+1 {
		t.Fatalf("%d attempts, want %d", b.Steps, len(want)+1)
	}
	next := b.DelayFunc()
	for i, ms := range want {
		d, base := next(), ms*time.Millisecond
		if d < base || d > base+base/2 {
			t.Errorf("wait %d is %v, want %v to %v", i+1, d, base, base+base/2)
		}
	}
}

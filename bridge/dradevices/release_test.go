package dradevices

import (
	"context"
	"errors"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// At start, the claims the API server no longer has are unprepared, one
// it cannot say is kept, and GC releases what no claim holds.
func TestReleaseGone(t *testing.T) {
	r := newRig(t, 2) // a slot free on each terminal for the stray allocation
	ctx := context.Background()
	for i, uid := range []types.UID{"kept", "deleted", "replaced", "unknown"} {
		if _, err := r.p.Prepare(ctx, claim(uid, result{"cdi.local", "n/tty-generic", r.devices[i]})); err != nil {
			t.Fatal(err)
		}
	}
	// An allocation of no claim: the device plugins' before the drop-in
	// moved to DRA, say.
	req, _ := spec.ParseRequest("tty:1")
	if _, err := r.pool(t, "tty-generic").Plugin.Add(ctx, invoke.AddRequest{Request: req, RequestID: "stray"}); err != nil {
		t.Fatal(err)
	}
	get := func(_ context.Context, _, name string) (*resourceapi.ResourceClaim, error) {
		switch name {
		case "kept":
			return claim("kept", result{"cdi.local", "n/tty-generic", r.devices[0]}), nil
		case "replaced":
			return claim("another-uid", result{"cdi.local", "n/tty-generic", r.devices[2]}), nil
		case "unknown":
			return nil, errors.New("the API server does not answer")
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name)
	}
	// Each claim's name is its UID here, for get.
	for _, uid := range r.p.Checkpoint.UIDs() {
		rec, _ := r.p.Checkpoint.Get(uid)
		rec.Name = string(uid)
		if err := r.p.Checkpoint.Put(uid, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.p.ReleaseGone(ctx, get); err == nil {
		t.Error("ReleaseGone hid the API server's error")
	}
	if got := fmt.Sprint(r.p.Checkpoint.UIDs()); got != "[kept unknown]" {
		t.Errorf("checkpoint holds %s, want kept and unknown", got)
	}
	if got := fmt.Sprint(r.allocations(t)); got != "[kept-0 unknown-0]" {
		t.Errorf("plugin allocations %s, want kept's and unknown's", got)
	}
	for uid, want := range map[types.UID]bool{"kept": true, "deleted": false, "replaced": false, "unknown": true} {
		if _, ok := r.spec(t, uid); ok != want {
			t.Errorf("spec of %s there: %v, want %v", uid, ok, want)
		}
	}
}

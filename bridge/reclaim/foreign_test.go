package reclaim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/spec"
)

// An allocation of the cameras' plugin that no slot names (a DRA claim's,
// its pool moved to the device plugins under a running pod) stays valid
// for GC while a container holds it, and the grace after, its device
// told as held elsewhere; then GC releases it.
func TestGCKeepsForeignAllocationsWhileHeld(t *testing.T) {
	r, k, p, now, _ := setup(t)
	ctx := context.Background()
	k.set(map[string][]string{"cdi.local/cam-1": {"cam-1-0"}, "cdi.local/cam": {"3"}})
	claim := spec.Allocation{RequestID: "u1-0", Result: spec.AddResult{Units: []spec.Unit{{Resource: "camera", Device: "lobby"}}}}
	stray := spec.Allocation{RequestID: "stray", Result: spec.AddResult{Units: []spec.Unit{{Resource: "camera", Device: "dock"}}}}
	p.allocs = map[string][]spec.Allocation{"cam": {claim, stray}}
	r.OthersHeld = func(pods *Pods, id string) bool { return pods.CDIDevices["cdi.local/claim="+id] }
	k.SetClaims(kubelettest.HeldClaim{Namespace: "ns", Name: "c", Driver: "cdi.local", CDIDevices: []string{"cdi.local/claim=u1-0"}})
	for _, step := range []struct {
		name      string
		after     time.Duration
		held      bool
		valid     []string
		elsewhere string
	}{
		{"held, and the stray within the grace", 0, true, []string{"cam-1-0", "cam-1-1", "stray", "u1-0"}, "map[dock:true lobby:true]"},
		{"held, the stray past the grace", time.Minute, true, []string{"cam-1-0", "cam-1-1", "u1-0"}, "map[lobby:true]"},
		{"no longer held, within the grace", time.Second, false, []string{"cam-1-0", "cam-1-1", "u1-0"}, "map[lobby:true]"},
		{"no longer held, past the grace", time.Minute, false, []string{"cam-1-0", "cam-1-1"}, "map[]"},
	} {
		t.Run(step.name, func(t *testing.T) {
			*now = now.Add(step.after)
			if !step.held {
				k.SetClaims()
			}
			if err := r.Once(ctx); err != nil {
				t.Fatal(err)
			}
			if got := p.gcs["cam,mic"]; !slices.Equal(got, step.valid) {
				t.Errorf("GC of the cameras' drop-in with valid %v, want %v", got, step.valid)
			}
			if got := fmt.Sprint(p.elsewhere["cam,mic"]); got != step.elsewhere {
				t.Errorf("held elsewhere %s, want %s", got, step.elsewhere)
			}
		})
	}
}

package node

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// A pool moved from DRA to the device plugins under a running pod: the
// plugin holds the pod's claim's ADD (request-id <claim UID>-<n>), which
// no slot of the store names. Slot reclaim's GC keeps it while the
// kubelet says a container holds the claim's CDI device, and the
// device is not offered meanwhile (its Instance-level slots unhealthy);
// once no container holds it, it is released and offered again.
func TestReclaimKeepsAnotherFrontEndsHeldAllocation(t *testing.T) {
	doc := map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reserved": 40}}
	// The claim's ADD is there before the node starts, as after a
	// restart that moved the pool: the device is not offered from the
	// first list on.
	const claimRequest = "8f0c1a3e-5d7b-4c2a-9e61-2b4f7d9c0a15-0"
	addBefore(t, doc, claimRequest, "tty41")
	k, n := startNodeWith(t, "tty.d/generic.conf", doc)
	il := instance.Name("tty-generic", "tty41", "n1", false)
	var first string
	err := k.Await(wait, func(h map[string][]kubelettest.List) bool {
		if l := h["cdi.test/"+il]; len(l) > 0 {
			first = listIDs(l[0].Devices)
			return true
		}
		return false
	})
	if err != nil || first != il+"-0!" {
		t.Errorf("the first list of tty41's resource is %q (%v), want its slot unhealthy", first, err)
	}
	pool, _ := n.pool("tty-generic")
	ctx := context.Background()
	pods, client := kubelettest.StartPodResources(t)
	pods.SetClaims(kubelettest.HeldClaim{Namespace: "ns", Name: "c", Driver: "cdi.test", CDIDevices: []string{"cdi.test/claim=" + claimRequest}})
	r := n.Reclaimer(client, 0)
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := allocations(t, pool.Plugin); !got[claimRequest] {
		t.Fatalf("the plugin holds %v after reclaim: the claim's ADD, which a container holds, was released", got)
	}
	waitList(t, k, "cdi.test/"+il, il+"-0!")

	pods.SetClaims()
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := allocations(t, pool.Plugin); len(got) != 0 {
		t.Errorf("the plugin holds %v once no container holds the claim, want nothing", got)
	}
	waitList(t, k, "cdi.test/"+il, il+"-0")
}

// addBefore runs ADD pinned to device, with requestID, on the plugin of
// the drop-in doc, before any node serves it.
func addBefore(t *testing.T, doc map[string]any, requestID, device string) {
	t.Helper()
	plugin := &invoke.Plugin{Path: filepath.Join(pluginDir, "generic-tty"), Config: exectest.Marshal(t, doc)}
	req, _ := spec.ParseRequest("tty:1")
	if _, err := plugin.Add(context.Background(), invoke.AddRequest{Request: req, RequestID: requestID, Devices: []string{device}}); err != nil {
		t.Fatal(err)
	}
}

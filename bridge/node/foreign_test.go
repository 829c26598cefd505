package node

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/reclaim"
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
	k, n := startNodeWith(t, "tty.d/generic.conf", doc)
	il := instance.Name("tty-generic", "tty41", "n1", false)
	waitList(t, k, "cdi.test/"+il, il+"-0")
	pool, _ := n.pool("tty-generic")
	const claimRequest = "8f0c1a3e-5d7b-4c2a-9e61-2b4f7d9c0a15-0"
	req, _ := spec.ParseRequest("tty:1")
	ctx := context.Background()
	if _, err := pool.Plugin.Add(ctx, invoke.AddRequest{Request: req, RequestID: claimRequest, Devices: []string{"tty41"}}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(kubelettest.SocketDir(t, "pr"), "kubelet.sock")
	pods, err := kubelettest.ServePodResources(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pods.Stop)
	conn, client, err := reclaim.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
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

package dradevices

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// kubeletAnswer is a PodResources Lister answering with fixed pods.
type kubeletAnswer []*podresourcesapi.PodResources

func (k kubeletAnswer) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: k}, nil
}

// sweepPastGrace runs Sweep with pods and inUse twice, the grace (set
// short) over between the two.
func sweepPastGrace(t *testing.T, p *Preparer, pods *reclaim.Pods, inUse ClaimsInUse) {
	t.Helper()
	p.Grace = 100 * time.Millisecond
	for range 2 {
		if err := p.Sweep(context.Background(), pods, inUse); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// Sweep keeps the claim of a running pod whose only user is an init
// container (a firmware loader, a device reset before the app starts)
// or no container at all, which the API server says is in use (inUse).
// The kubelet never names such a claim: its PodResources List (kubelet
// 1.37.2, pkg/kubelet/apis/podresources/server_v1.go) skips every init
// container that is not a restartable sidecar, and a container's
// DynamicResources (pkg/kubelet/cm/dra/manager.go,
// GetContainerClaimInfos) are only the claims its resources.claims
// names. The kubelet's own answer for such a pod is below: the pod, its
// app container, no claim. Released, the claim's ADD would be DELed, its
// CDI spec removed while the pod runs: an init container run again (its
// sandbox made anew) could not start, and the kubelet, which takes the
// claim for prepared, would never prepare it again.
func TestSweepKeepsTheClaimOfAnInitContainer(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	c := claim("fw", result{"cdi.local", "n/tty-generic", r.devices[0]})
	if _, err := r.p.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	// The running pod: init container "load-firmware" uses the claim,
	// container "app" does not; the kubelet lists the app alone.
	answer := kubeletAnswer{{Name: "fw-pod", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "app"}}}}
	pods, err := reclaim.ListPods(ctx, answer, "cdi.local")
	if err != nil {
		t.Fatal(err)
	}
	inUse := func(context.Context) (map[types.UID]bool, error) { return used("fw"), nil }
	sweepPastGrace(t, r.p, pods, inUse)
	if got := r.sorted(t); got != "[fw-0]" {
		t.Errorf("plugin allocations %s, want [fw-0]: the running pod's claim was DELed", got)
	}
	if _, ok := r.p.Checkpoint.Get("fw"); !ok {
		t.Error("the running pod's claim is no longer recorded")
	}
	if _, ok := r.spec(t, "fw"); !ok {
		t.Error("the running pod's claim's CDI spec was removed: its init container cannot start again")
	}
}

// A stale record (a claim the kubelet will never unprepare) is released
// when a new claim of its namespace and name is prepared: the kubelet
// prepares a claim of a name only once the one before it is unprepared.
// Kept, the old claim's ADD would hold tty41, which the slices offer as
// free (a recorded claim is not withheld), and as the kubelet names the
// name, no Sweep would ever release it.
func TestAStaleRecordOfAReusedNameIsReleased(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	old := claim("old", result{"cdi.local", "n/tty-generic", r.devices[0]})
	old.Name = "gpu"
	if _, err := r.p.Prepare(ctx, old); err != nil {
		t.Fatal(err)
	}
	// The old claim was deleted and made again under its name (a new
	// UID), allocated another terminal, prepared, and its pod runs.
	renewed := claim("new", result{"cdi.local", "n/tty-generic", r.devices[1]})
	renewed.Name = "gpu"
	if _, err := r.p.Prepare(ctx, renewed); err != nil {
		t.Fatal(err)
	}
	answer := kubeletAnswer{{Name: "p", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{{Name: "app",
		DynamicResources: []*podresourcesapi.DynamicResource{{ClaimName: "gpu", ClaimNamespace: "ns", ClaimResources: []*podresourcesapi.ClaimResource{{
			DriverName: "cdi.local", PoolName: "n/tty-generic", DeviceName: r.devices[1],
			CdiDevices: []*podresourcesapi.CDIDevice{{Name: "cdi.local/claim=new-0"}}}}}}}}}}
	pods, err := reclaim.ListPods(ctx, answer, "cdi.local")
	if err != nil {
		t.Fatal(err)
	}
	sweepPastGrace(t, r.p, pods, nil)
	if got := r.sorted(t); got != "[new-0]" {
		t.Errorf("plugin allocations %s, want [new-0]: old-0, of a claim no pod has, is kept", got)
	}
	if w := r.p.Withheld()["tty-generic"]; !w[r.pool(t, "tty-generic").Devices[0].ID] {
		if _, err := r.p.Prepare(ctx, claim("next", result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
			t.Errorf("tty41 is offered, and the claim the scheduler gives it cannot be prepared: %v", err)
		}
	}
}

// The Sweep that comes right after a claim's Prepare keeps it, even with
// --reclaim-grace=0: the front end's sweep asks the kubelet before it
// takes the lock (drafront.sweep), so a Prepare that ran meanwhile (the
// other bridge's, or this one's) is unnamed in the answer. No claim is
// released at the first sweep that finds it unnamed: released, the pod
// would start with a CDI name whose spec is gone.
func TestSweepKeepsAClaimJustPreparedWithGraceZero(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	answer := kubeletAnswer{} // asked before the Prepare: no pod yet
	pods, err := reclaim.ListPods(ctx, answer, "cdi.local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.p.Prepare(ctx, claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
		t.Fatal(err)
	}
	r.p.Grace = 0
	if err := r.p.Sweep(ctx, pods, nil); err != nil {
		t.Fatal(err)
	}
	if got := r.sorted(t); got != "[u1-0]" {
		t.Errorf("plugin allocations %s right after the Prepare, want [u1-0]", got)
	}
	if _, ok := r.spec(t, "u1"); !ok {
		t.Error("the CDI spec of the claim just prepared is gone")
	}
}

// Sweep never DELs a device plugins' slot of a drop-in the device
// plugins serve that shares its plugin's state with the DRA drop-in, and
// leaves its device out of the slices. SPEC.md
// (Section 1, stateDir) says two drop-ins of one type and plugin with the
// same stateDir (the default, /var/lib/cdi) share one state and see each
// other's allocations, which is what keeps two drop-ins of the same
// devices from giving one twice; Split (drafront) divides pools by
// drop-in file, not by state. The DRA drop-in's LIST has the other
// drop-in's slot; DELed, the running pod's terminal would be free in the
// plugin's state, offered again, and the next ADD of it would succeed
// (two containers on a terminal of capacity 1).
func TestSweepLeavesTheDevicePluginsSlotOfASharedState(t *testing.T) {
	confDir, stateDir := t.TempDir(), t.TempDir()
	args := map[string]any{"root": exectest.FixtureRoot(t), "stateDir": stateDir, "num_system_reserved": 40, "capacity": 1}
	writeDropIn(t, confDir, "tty.d/generic.conf", exectest.Conf(t, "0.1.0", "tty", "generic-tty", args))
	writeDropIn(t, confDir, "tty.d/serial.conf", exectest.Conf(t, "0.1.0", "tty", "generic-tty", args))
	pools, err := (&discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}}).Discover(context.Background())
	if err != nil || len(pools) != 2 {
		t.Fatalf("discovery: %v, %v", pools, err)
	}
	// What drafront.Split makes of --dra-pools=tty-generic: each
	// drop-in's pools on one side, by drop-in file.
	var devicePlugins, viaDRA []discovery.Pool
	for _, pl := range pools {
		if pl.Name == "tty-generic" {
			viaDRA = append(viaDRA, pl)
		} else {
			devicePlugins = append(devicePlugins, pl)
		}
	}
	if len(devicePlugins) != 1 || len(viaDRA) != 1 || devicePlugins[0].Conf.Path == viaDRA[0].Conf.Path {
		t.Fatalf("split: %v, %v", devicePlugins, viaDRA)
	}
	dir, err := cdispec.Open(t.TempDir(), "cdi.local")
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := LoadCheckpoint(filepath.Join(t.TempDir(), "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := &Preparer{Driver: "cdi.local", Node: "n", CDI: dir, Vendor: "cdi.local", Checkpoint: ckpt}
	p.SetPools(viaDRA)
	// The device plugins' Allocate for a running pod: the serial
	// drop-in's slot of its first terminal, which the kubelet lists.
	serial := devicePlugins[0]
	dev := serial.Devices[0]
	inst := instance.Name(serial.Name, dev.ID, "n", false)
	slot := instance.SlotID(inst, 0)
	req, _ := spec.ParseRequest("tty:1")
	if _, err := serial.Plugin.Add(context.Background(), invoke.AddRequest{Request: req, RequestID: slot, Devices: []string{dev.ID}}); err != nil {
		t.Fatal(err)
	}
	pods := naming()
	pods.Devices["cdi.local/"+inst] = map[string]bool{slot: true}
	sweepPastGrace(t, p, pods, nil)
	l, err := serial.Plugin.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Allocations) != 1 || l.Allocations[0].RequestID != slot {
		t.Errorf("the plugin's state holds %+v, want the running pod's slot %s", l.Allocations, slot)
	}
	if p.Withheld()["tty-generic"][dev.ID] {
		return
	}
	// The terminal is offered in the DRA slices again; the scheduler gives
	// it to a claim, whose Prepare succeeds on the terminal the running
	// pod holds.
	if _, err := p.Prepare(context.Background(), claim("next", result{"cdi.local", "n/tty-generic", DeviceName(dev.ID)})); err == nil {
		t.Errorf("%s, which a running pod holds through the device plugins, is given to a DRA claim too", dev.ID)
	}
}

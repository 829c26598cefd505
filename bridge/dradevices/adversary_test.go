package dradevices

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdiexec/cdi/bridge/reclaim"
)

// kubeletAnswer is a PodResources Lister answering with fixed pods.
type kubeletAnswer []*podresourcesapi.PodResources

func (k kubeletAnswer) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: k}, nil
}

// sweepPastGrace runs Sweep with pods twice, the grace (set short) over
// between the two.
func sweepPastGrace(t *testing.T, p *Preparer, pods *reclaim.Pods) {
	t.Helper()
	p.Grace = 100 * time.Millisecond
	for range 2 {
		if err := p.Sweep(context.Background(), pods); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// Adversary: reproduces Sweep unpreparing the claim of a running pod
// whose only user is an init container (a firmware loader, a device
// reset before the app starts) or no container at all. The kubelet
// never names such a claim: its PodResources List (kubelet 1.37.2,
// pkg/kubelet/apis/podresources/server_v1.go) skips every init container
// that is not a restartable sidecar, and a container's DynamicResources
// (pkg/kubelet/cm/dra/manager.go, GetContainerClaimInfos) are only the
// claims its resources.claims names. The kubelet's own answer for such a
// pod is below: the pod, its app container, no claim. After the grace
// the claim's ADD is DELed, its record forgotten and its CDI spec
// removed while the pod runs: an init container run again (its sandbox
// made anew) cannot start, its CDI device unresolvable, and the kubelet,
// which took the claim for prepared, never prepares it again.
func TestSweepAdversaryReleasesTheClaimOfAnInitContainer(t *testing.T) {
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
	sweepPastGrace(t, r.p, pods)
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

// Adversary: reproduces a stale record (a claim the kubelet will never
// unprepare: the case Sweep exists for) kept for good because a new
// claim took its namespace/name. namedClaims matches records by
// namespace/name alone, though the kubelet's CDI names tell the UID
// (cdi.local/claim=new-0, not old-0). The old claim's ADD holds tty41,
// which the slices offer as free (a recorded claim is not withheld), so
// the next claim the scheduler gives tty41 fails to prepare for as long
// as the new claim's pod runs.
func TestSweepAdversaryKeepsAStaleRecordOfAReusedName(t *testing.T) {
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
	sweepPastGrace(t, r.p, pods)
	if got := r.sorted(t); got != "[new-0]" {
		t.Errorf("plugin allocations %s, want [new-0]: old-0, of a claim no pod has, is kept", got)
	}
	if w := r.p.Withheld()["tty-generic"]; !w[r.pool(t, "tty-generic").Devices[0].ID] {
		if _, err := r.p.Prepare(ctx, claim("next", result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
			t.Errorf("tty41 is offered, and the claim the scheduler gives it cannot be prepared: %v", err)
		}
	}
}

// Adversary: reproduces a claim released by the Sweep that comes right
// after its Prepare, with --reclaim-grace=0 (which the flag takes). The
// kubelet names a claim only once its NodePrepareResources returned (the
// claim's ClaimResources are the devices the response gave,
// pkg/kubelet/cm/container_manager_linux.go GetDynamicResources), and
// the front end's sweep asks the kubelet before it takes the lock
// (drafront.sweep), so a Prepare that ran meanwhile (the other bridge's,
// or this one's) is unnamed in the answer. With grace 0 its first
// unnamed sighting releases it: the pod starts with a CDI name whose
// spec is gone.
func TestSweepAdversaryReleasesAClaimJustPreparedWithGraceZero(t *testing.T) {
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
	if err := r.p.Sweep(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if got := r.sorted(t); got != "[u1-0]" {
		t.Errorf("plugin allocations %s right after the Prepare, want [u1-0]", got)
	}
	if _, ok := r.spec(t, "u1"); !ok {
		t.Error("the CDI spec of the claim just prepared is gone")
	}
}

package dradevices

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// reserved is claim, reserved for a pod.
func reserved(uid types.UID, results ...result) resourceapi.ResourceClaim {
	c := claim(uid, results...)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + string(uid), UID: "p-" + uid}}
	return *c
}

// given reads t.
func given(t Truth) ReadTruth {
	return func(context.Context, []types.NamespacedName) (Truth, error) { return t, nil }
}

// inAPI is claims as the API server has them, by namespace and name.
func inAPI(claims ...resourceapi.ResourceClaim) map[string]*resourceapi.ResourceClaim {
	out := map[string]*resourceapi.ResourceClaim{}
	for i := range claims {
		out[claims[i].Namespace+"/"+claims[i].Name] = &claims[i]
	}
	return out
}

// used is claims in use here, as Truth.InUse.
func used(claims ...types.UID) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, uid := range claims {
		out[uid] = true
	}
	return out
}

// naming is what the kubelet's containers hold when its pods name claims.
func naming(claims ...types.UID) *reclaim.Pods {
	pods := &reclaim.Pods{Devices: reclaim.Held{}, Claims: map[string]bool{}, CDIDevices: map[string]bool{}}
	for _, uid := range claims {
		pods.Claims["ns/"+string(uid)] = true
	}
	return pods
}

// add runs ADD on the terminals' plugin, as a caller other than Prepare.
func (r *rig) add(t *testing.T, requestID string, device ...string) {
	t.Helper()
	req, _ := spec.ParseRequest("tty:1")
	if _, err := r.pool(t, "tty-generic").Plugin.Add(context.Background(), invoke.AddRequest{Request: req, RequestID: requestID, Devices: device}); err != nil {
		t.Fatal(err)
	}
}

// sorted is the terminals' plugin's request-ids, sorted.
func (r *rig) sorted(t *testing.T) string {
	t.Helper()
	return fmt.Sprint(slices.Sorted(slices.Values(r.allocations(t))))
}

// Rebuild makes the checkpoint, the plugin and the CDI specs agree with
// the kubelet and the API server's claims it names: a claim the kubelet
// names, allocated here and reserved, is prepared, whether the
// checkpoint records it, the plugin holds it without a record (a
// checkpoint lost), or neither does (a reboot); a recorded claim the API
// server no longer has is unprepared; a claim reserved for a pod the
// kubelet does not run is not prepared. What holds no claim the kubelet
// names, and the device plugins' slot no container holds, is kept for
// the grace, its device left out of the slices, and released after it;
// so is a recorded claim the kubelet stops naming, at the second sweep
// that finds it so at the earliest.
func TestRebuild(t *testing.T) {
	r := newRig(t, 2) // room on a terminal for the stray allocations
	ctx := context.Background()
	tty := func(i int) result { return result{"cdi.local", "n/tty-generic", r.devices[i]} }
	for uid, dev := range map[types.UID]int{"kept": 0, "deleted": 1} {
		if _, err := r.p.Prepare(ctx, claim(uid, tty(dev))); err != nil {
			t.Fatal(err)
		}
	}
	devs := r.pool(t, "tty-generic").Devices
	r.add(t, "lost-0", devs[2].ID)
	slot := instance.SlotID(instance.Name("tty-generic", devs[3].ID, "n", false), 0)
	r.add(t, slot, devs[3].ID)
	kept, lost := reserved("kept", tty(0)), reserved("lost", tty(2))
	r.p.Grace = time.Hour

	t.Run("without the kubelet nothing is released", func(t *testing.T) {
		var asked []types.NamespacedName
		read := func(_ context.Context, recorded []types.NamespacedName) (Truth, error) {
			asked = recorded
			return Truth{Claims: inAPI(kept, lost)}, nil
		}
		if err := r.p.Rebuild(ctx, read); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(asked); got != "[ns/deleted ns/kept]" {
			t.Errorf("Rebuild asked for the recorded claims %s, want ns/deleted and ns/kept", got)
		}
		if got, want := r.sorted(t), fmt.Sprint([]string{"deleted-0", "kept-0", "lost-0", slot}); got != want {
			t.Errorf("plugin allocations %s, want %s", got, want)
		}
	})
	t.Run("with the kubelet", func(t *testing.T) {
		r.add(t, "stray", devs[3].ID)
		r.add(t, "orphan-0", devs[1].ID)
		rebooted, orphan := reserved("rebooted", tty(1)), reserved("orphan", tty(1))
		pods := naming("kept", "lost", "rebooted")
		pods.Devices["cdi.local/"+slot[:len(slot)-2]] = map[string]bool{slot: true}
		if err := r.p.Rebuild(ctx, given(Truth{Claims: inAPI(kept, lost, rebooted, orphan), Pods: pods, InUse: used("kept", "lost", "rebooted")})); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(r.p.Checkpoint.UIDs()); got != "[kept lost rebooted]" {
			t.Errorf("checkpoint %s, want kept, lost, rebooted", got)
		}
		if got, want := r.sorted(t), fmt.Sprint(slices.Sorted(slices.Values([]string{"kept-0", "lost-0", "orphan-0", "rebooted-0", slot, "stray"}))); got != want {
			t.Errorf("plugin allocations %s, want %s: orphan-0 and stray kept for the grace", got, want)
		}
		for uid, want := range map[types.UID]bool{"kept": true, "lost": true, "rebooted": true, "deleted": false, "orphan": false} {
			if _, ok := r.spec(t, uid); ok != want {
				t.Errorf("spec of %s there: %v, want %v", uid, ok, want)
			}
		}
		withheld := r.p.Withheld()["tty-generic"]
		for _, d := range []int{1, 3} {
			if !withheld[devs[d].ID] {
				t.Errorf("%s, which orphan-0 or the slot a container holds has, is offered", devs[d].ID)
			}
		}
		if withheld[devs[0].ID] {
			t.Errorf("%s, kept's, is left out of the slices", devs[0].ID)
		}
	})
	t.Run("the grace over", func(t *testing.T) {
		r.p.Grace = 0
		if err := r.p.Sweep(ctx, naming("kept", "lost", "rebooted"), nil); err != nil {
			t.Fatal(err)
		}
		if got := r.sorted(t); got != "[kept-0 lost-0 rebooted-0]" {
			t.Errorf("plugin allocations %s, want the named claims'", got)
		}
		if w := r.p.Withheld()["tty-generic"]; len(w) > 0 {
			t.Errorf("withheld %v once released", w)
		}
	})
	t.Run("a claim the kubelet no longer names", func(t *testing.T) {
		for range 2 { // the first sweep that finds it unnamed keeps it
			if err := r.p.Sweep(ctx, naming("kept", "lost"), nil); err != nil {
				t.Fatal(err)
			}
		}
		if got := fmt.Sprint(r.p.Checkpoint.UIDs()); got != "[kept lost]" {
			t.Errorf("checkpoint %s, want kept and lost", got)
		}
		if got := r.sorted(t); got != "[kept-0 lost-0]" {
			t.Errorf("plugin allocations %s, want kept-0 and lost-0", got)
		}
		if _, ok := r.spec(t, "rebooted"); ok {
			t.Error("the spec of the claim released is still there")
		}
	})
}

// A claim the checkpoint does not record is unprepared by what the
// plugins hold under its request-ids.
func TestUnprepareWithoutARecord(t *testing.T) {
	r := newRig(t, 1)
	r.add(t, "lost-0", "tty41")
	r.add(t, "lost-1", "tty42")
	r.add(t, "other-0", "tty43")
	if err := r.p.Unprepare(context.Background(), "lost"); err != nil {
		t.Fatal(err)
	}
	if got := r.sorted(t); got != "[other-0]" {
		t.Errorf("plugin allocations %s, want other-0 alone", got)
	}
}

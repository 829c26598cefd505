package dradevices

import (
	"context"
	"fmt"
	"slices"
	"testing"

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
	c.Name = string(uid)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + string(uid), UID: "p-" + uid}}
	return *c
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
// the API server's claims and the kubelet's containers: a claim allocated
// here and reserved is prepared, whether the checkpoint records it, the
// plugin holds it without a record (a checkpoint lost), or neither does
// (a reboot); a recorded claim the API server no longer has is
// unprepared; what holds no claim and no container is released; the
// device plugins' slot a container holds is kept, its terminal left out
// of the slices until Sweep finds it no longer held.
func TestRebuild(t *testing.T) {
	r := newRig(t, 2) // room on a terminal for the stray allocation
	ctx := context.Background()
	tty := func(i int) result { return result{"cdi.local", "n/tty-generic", r.devices[i]} }
	for uid, dev := range map[types.UID]int{"kept": 0, "deleted": 1} {
		if _, err := r.p.Prepare(ctx, claim(uid, tty(dev))); err != nil {
			t.Fatal(err)
		}
	}
	r.add(t, "lost-0", "tty43")
	ids := r.pool(t, "tty-generic").Devices
	slot := instance.SlotID(instance.Name("tty-generic", ids[3].ID, "n", false), 0)
	r.add(t, slot, ids[3].ID)
	claims := []resourceapi.ResourceClaim{reserved("kept", tty(0)), reserved("lost", tty(2))}
	pods := &reclaim.Pods{Devices: reclaim.Held{"cdi.local/" + slot[:len(slot)-2]: {slot: true}}}

	t.Run("without the kubelet nothing is released", func(t *testing.T) {
		if err := r.p.Rebuild(ctx, Truth{Claims: claims}); err != nil {
			t.Fatal(err)
		}
		if got, want := r.sorted(t), fmt.Sprint([]string{"deleted-0", "kept-0", "lost-0", slot}); got != want {
			t.Errorf("plugin allocations %s, want %s", got, want)
		}
	})
	t.Run("with the kubelet", func(t *testing.T) {
		r.add(t, "stray")
		rebooted := reserved("rebooted", result{"cdi.local", "n/tty-generic", r.devices[1]})
		if err := r.p.Rebuild(ctx, Truth{Claims: append(claims, rebooted), Pods: pods}); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(r.p.Checkpoint.UIDs()); got != "[kept lost rebooted]" {
			t.Errorf("checkpoint %s, want kept, lost, rebooted", got)
		}
		if got, want := r.sorted(t), fmt.Sprint([]string{"kept-0", "lost-0", "rebooted-0", slot}); got != want {
			t.Errorf("plugin allocations %s, want %s", got, want)
		}
		for uid, want := range map[types.UID]bool{"kept": true, "lost": true, "rebooted": true, "deleted": false} {
			if _, ok := r.spec(t, uid); ok != want {
				t.Errorf("spec of %s there: %v, want %v", uid, ok, want)
			}
		}
		if r.p.Withheld()["tty-generic"][ids[3].ID] != true {
			t.Errorf("%s, which the device plugins' slot a container holds has, is offered", ids[3].ID)
		}
	})
	t.Run("the slot no longer held", func(t *testing.T) {
		if err := r.p.Sweep(ctx, &reclaim.Pods{}); err != nil {
			t.Fatal(err)
		}
		if got := r.sorted(t); got != "[kept-0 lost-0 rebooted-0]" {
			t.Errorf("plugin allocations %s, want the claims'", got)
		}
		if r.p.Withheld()["tty-generic"][ids[3].ID] {
			t.Errorf("%s is not offered once its slot is released", ids[3].ID)
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

package dradevices

import (
	"context"
	"testing"
)

// A Prepare repeated for a claim prepared before (the kubelet's after its
// restart, or the rebuild's after the bridge's) whose ADD fails once
// leaves what the earlier Prepare did: the plugin still holds every
// request-id of the claim, its record keeps the ADDs' results, its CDI
// spec stays, and its devices are still held (Holds). Only an ADD this
// call made is undone: a device the claim had not held before.
func TestRepeatedPrepareKeepsWhatWasPrepared(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fail is the ADD refused in the repeat.
		fail string
	}{
		{name: "the first ADD fails", fail: "ADD u1-0"},
		{name: "the second ADD fails", fail: "ADD u1-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1)
			ctx := context.Background()
			c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"cdi.local", "n/tty-generic", r.devices[1]})
			if _, err := r.p.Prepare(ctx, c); err != nil {
				t.Fatal(err)
			}
			f := &failing{fail: map[string]bool{tc.fail: true}}
			r.failEvery(f)
			if _, err := r.p.Prepare(ctx, c); err == nil {
				t.Fatalf("the repeat succeeded with %s refused", tc.fail)
			}
			if got := r.sorted(t); got != "[u1-0 u1-1]" {
				t.Errorf("plugin allocations after the failed repeat %s, want u1-0 and u1-1, which the running container holds", got)
			}
			rec, ok := r.p.Checkpoint.Get("u1")
			if !ok || !rec.Prepared() {
				t.Errorf("the claim's record after the failed repeat: there %v, prepared %v; want it kept as prepared", ok, rec.Prepared())
			}
			if _, ok := r.preparer(t).Checkpoint.Get("u1"); !ok {
				t.Error("the claim's record is gone from the file")
			}
			if _, ok := r.spec(t, "u1"); !ok {
				t.Error("the claim's CDI spec is gone: a restarted container cannot find its devices")
			}
			for _, d := range r.pool(t, "tty-generic").Devices[:2] {
				if !r.p.Holds("tty-generic", d) {
					t.Errorf("device %s is not held: a vanished device would be dropped while its container runs", d.ID)
				}
			}
		})
	}
}

// A repeat that fails after an ADD of a device the claim did not hold
// before (its record lacks that result: the earlier Prepare crashed
// before it) undoes that ADD, and only that one.
func TestRepeatedPrepareUndoesOnlyItsOwnADDs(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"cdi.local", "n/tty-generic", r.devices[1]},
		result{"cdi.local", "n/tty-generic", r.devices[2]})
	if _, err := r.p.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	rec, _ := r.p.Checkpoint.Get("u1")
	rec.Devices[0].Result = nil
	if err := r.p.Checkpoint.Put("u1", rec); err != nil {
		t.Fatal(err)
	}
	if err := r.pool(t, "tty-generic").Plugin.Del(ctx, "u1-0"); err != nil {
		t.Fatal(err)
	}
	r.failEvery(&failing{fail: map[string]bool{"ADD u1-2": true}})
	if _, err := r.p.Prepare(ctx, c); err == nil {
		t.Fatal("the repeat succeeded with an ADD refused")
	}
	if got := r.sorted(t); got != "[u1-1 u1-2]" {
		t.Errorf("plugin allocations %s, want u1-1 and u1-2: u1-0's ADD, this call's, undone", got)
	}
	rec, ok := r.p.Checkpoint.Get("u1")
	if !ok || rec.Devices[0].Result != nil || rec.Devices[1].Result == nil || rec.Devices[2].Result == nil {
		t.Errorf("record there %v, %+v: want u1-1 and u1-2 with their results, u1-0 without", ok, rec.Devices)
	}
}

// The rebuild's repeat of a claim whose record was lost (a checkpoint set
// aside) that fails keeps what the plugin held of it: the request-ids
// its LIST had before are held by an earlier Prepare, and the record is
// written with them, for the kubelet's Unprepare.
func TestRebuildRepeatKeepsWhatThePluginHeld(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	c := reserved("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"cdi.local", "n/tty-generic", r.devices[1]})
	if _, err := r.p.Prepare(ctx, &c); err != nil {
		t.Fatal(err)
	}
	if err := r.p.Checkpoint.Delete("u1"); err != nil {
		t.Fatal(err)
	}
	r.failEvery(&failing{fail: map[string]bool{"ADD u1-1": true}})
	p := r.preparer(t)
	err := p.Rebuild(ctx, given(Truth{Claims: inAPI(c), Pods: naming("u1"), InUse: used("u1")}))
	if err == nil {
		t.Fatal("Rebuild succeeded with an ADD refused")
	}
	if got := r.sorted(t); got != "[u1-0 u1-1]" {
		t.Errorf("plugin allocations after the failed repeat %s, want u1-0 and u1-1, which the running container holds", got)
	}
	if _, ok := p.Checkpoint.Get("u1"); !ok {
		t.Error("the claim is not recorded: the kubelet's Unprepare would find it by LIST only")
	}
	for _, d := range r.pool(t, "tty-generic").Devices[:2] {
		if !p.Holds("tty-generic", d) {
			t.Errorf("device %s is not held", d.ID)
		}
	}
}

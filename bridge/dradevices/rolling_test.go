package dradevices

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/reclaim"
)

// rollingPair is the two bridges of a rolling update on one node: the
// old pod's and the new pod's, with one checkpoint file, one plugin
// state and one plugin directory. The new one starts (reads the
// checkpoint) before the old one is done preparing.
func rollingPair(t *testing.T, r *rig) (oldPod, newPod *Preparer) {
	t.Helper()
	pluginDir := t.TempDir()
	oldPod = r.p
	oldPod.PluginDir = pluginDir
	newPod = r.preparer(t)
	newPod.PluginDir = pluginDir
	return oldPod, newPod
}

// checkRecorded checks that the checkpoint file records the claims want.
func (r *rig) checkRecorded(t *testing.T, want ...types.UID) {
	t.Helper()
	ckpt, err := LoadCheckpoint(r.ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if got := ckpt.UIDs(); !slices.Equal(got, want) {
		t.Errorf("the checkpoint records %v, want %v", got, want)
	}
}

// Over a rolling update, a claim the old bridge prepared after the new
// one started is the new one's to know: the new one's Rebuild keeps its
// ADDs (its GC would free a device a pod holds) and its record, one the
// Rebuild does not prepare again too, its Prepare does not ADD again,
// its Unprepare DELs them, and neither bridge's checkpoint write drops
// the other's claims.
func TestRollingUpdateSharesTheCheckpoint(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	oldPod, newPod := rollingPair(t, r)
	tty := func(i int) result { return result{"cdi.local", "n/tty-generic", r.devices[i]} }
	late, ending := claim("late", tty(0)), claim("ending", tty(3))
	for _, c := range []*resourceapi.ResourceClaim{late, ending} {
		if _, err := oldPod.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// The API server has late allocated, and reserved for a pod whose
	// container has not started, which the kubelet names; and ending
	// allocated still, its pod gone: the kubelet is to unprepare it,
	// which Rebuild leaves to it (for the grace).
	endingNow := reserved("ending", tty(3))
	endingNow.Status.ReservedFor = nil
	newPod.Grace = time.Hour
	if err := newPod.Rebuild(ctx, given(Truth{Claims: inAPI(reserved("late", tty(0)), endingNow), Pods: naming("late"), InUse: used("late")})); err != nil {
		t.Fatal(err)
	}
	if got := r.sorted(t); got != "[ending-0 late-0]" {
		t.Fatalf("after the new bridge's Rebuild the plugin holds %v, want the old bridge's ending-0 and late-0", got)
	}
	r.checkRecorded(t, "ending", "late")
	if _, err := newPod.Prepare(ctx, late); err != nil {
		t.Errorf("the new bridge's Prepare of the old one's claim: %v", err)
	}
	next := claim("next", tty(1))
	if _, err := newPod.Prepare(ctx, next); err != nil {
		t.Fatal(err)
	}
	other := claim("other", tty(2))
	if _, err := oldPod.Prepare(ctx, other); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*resourceapi.ResourceClaim{late, ending} {
		if err := newPod.Unprepare(ctx, c.UID); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.sorted(t); got != "[next-0 other-0]" {
		t.Errorf("the plugin holds %v, want next-0 and other-0 (late-0 and ending-0 unprepared by the new bridge)", got)
	}
	r.checkRecorded(t, "next", "other")
}

// The new bridge's Rebuild, and each Sweep, waits for a call the old one
// is running: the library's lock of the calls is held around them.
func TestRebuildWaitsForTheOtherBridgesCall(t *testing.T) {
	for name, work := range map[string]func(p *Preparer) error{
		"Rebuild": func(p *Preparer) error { return p.Rebuild(context.Background(), given(Truth{Pods: &reclaim.Pods{}})) },
		"Sweep":   func(p *Preparer) error { return p.Sweep(context.Background(), &reclaim.Pods{}, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 1)
			_, newPod := rollingPair(t, r)
			unlock, err := dra.LockCalls(context.Background(), newPod.PluginDir)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- work(newPod) }()
			select {
			case err := <-done:
				t.Fatalf("%s returned (%v) while the other bridge's call held the lock", name, err)
			case <-time.After(300 * time.Millisecond):
			}
			unlock()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The new bridge's Rebuild reads the API server's claims under the
// library's lock of the calls. The old bridge still serves the kubelet,
// and a claim the scheduler allocates after that read is prepared by it
// after the Rebuild: never between the read and the release of what the
// read does not name, which would take the claim's record and ADDs for
// leftovers, and free a device its pod is about to get.
func TestRebuildKeepsWhatTheOtherBridgePreparesMeanwhile(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	oldPod, newPod := rollingPair(t, r)
	late := reserved("late", result{"cdi.local", "n/tty-generic", r.devices[0]})
	var mu sync.Mutex
	var api []resourceapi.ResourceClaim // the API server's claims
	// oldCall is the kubelet's call to the old bridge as the library
	// makes it, for a claim the scheduler has just allocated.
	oldCall := func() error {
		mu.Lock()
		api = append(api, late)
		mu.Unlock()
		unlock, err := dra.LockCalls(ctx, oldPod.PluginDir)
		if err != nil {
			return err
		}
		defer unlock()
		_, err = oldPod.Prepare(ctx, &late)
		return err
	}
	called := make(chan error, 1)
	read := func(context.Context, []types.NamespacedName) (Truth, error) {
		mu.Lock()
		truth := Truth{Claims: inAPI(api...), Pods: &reclaim.Pods{}}
		mu.Unlock()
		// The old bridge's call comes now, before this Rebuild releases
		// what truth does not name; let it run if it can.
		go func() { called <- oldCall() }()
		select {
		case err := <-called:
			called <- err
		case <-time.After(2 * time.Second): // it waits for the lock
		}
		return truth, nil
	}
	if err := newPod.Rebuild(ctx, read); err != nil {
		t.Fatal(err)
	}
	if err := <-called; err != nil {
		t.Fatalf("the old bridge's Prepare: %v", err)
	}
	if got := r.allocations(t); !slices.Equal(got, []string{"late-0"}) {
		t.Errorf("the plugin holds %v, want late-0, which the old bridge prepared", got)
	}
	r.checkRecorded(t, "late")
}

// Read anew in a call, a checkpoint that cannot be read (cut short) is
// moved aside, as at start, and does not fail the call: the bridge
// writes anew the claims it knows of, and a claim only the other bridge
// knew of is unprepared by what the plugin's LIST holds for it.
func TestRollingUpdateSetsAsideAnUnreadableCheckpoint(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	oldPod, newPod := rollingPair(t, r)
	var told []SetAside
	newPod.OnSetAside = func(a SetAside) { told = append(told, a) }
	if _, err := oldPod.Prepare(ctx, claim("a", result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.ckpt, []byte(`{"version":1,"claims":{"a":{"namesp`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newPod.Prepare(ctx, claim("b", result{"cdi.local", "n/tty-generic", r.devices[1]})); err != nil {
		t.Fatalf("Prepare with the checkpoint cut short: %v", err)
	}
	if len(told) != 1 || told[0].Reason != ReasonUnreadable || !errors.Is(told[0].Err, ErrCheckpoint) {
		t.Fatalf("OnSetAside told %+v, want the unreadable checkpoint once", told)
	}
	if kept, err := os.ReadFile(told[0].Path); err != nil || !strings.HasSuffix(string(kept), "namesp") {
		t.Errorf("the file set aside, %s: %q, %v; want the one cut short", told[0].Path, kept, err)
	}
	if err := oldPod.Unprepare(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := r.allocations(t); !slices.Equal(got, []string{"b-0"}) {
		t.Errorf("the plugin holds %v, want b-0 (a-0 unprepared by the plugin's LIST)", got)
	}
	r.checkRecorded(t, "b")
}

// Read anew in a call, a checkpoint that is not there (deleted, or set
// aside by the other bridge) leaves the records in memory, which the
// call's change writes: a deleted file does not make a bridge forget
// the claims it prepared.
func TestRollingUpdateKeepsTheRecordsOfADeletedCheckpoint(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	oldPod, _ := rollingPair(t, r)
	if _, err := oldPod.Prepare(ctx, claim("a", result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(r.ckpt); err != nil {
		t.Fatal(err)
	}
	if _, err := oldPod.Prepare(ctx, claim("b", result{"cdi.local", "n/tty-generic", r.devices[1]})); err != nil {
		t.Fatal(err)
	}
	r.checkRecorded(t, "a", "b")
}

// A device a claim the other bridge of a rolling update prepared holds is
// held for this one too, before any call of its own has read the
// checkpoint anew: discovery keeps it when it vanishes (Holds).
func TestRollingUpdateHoldsTheOtherBridgesDevices(t *testing.T) {
	r := newRig(t, 1)
	oldPod, newPod := rollingPair(t, r)
	if _, err := oldPod.Prepare(context.Background(), claim("a", result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
		t.Fatal(err)
	}
	devs := r.pool(t, "tty-generic").Devices
	if !newPod.Holds("tty-generic", devs[0]) {
		t.Errorf("the new bridge does not hold %s, which the old one prepared", devs[0].ID)
	}
	if newPod.Holds("tty-generic", devs[1]) {
		t.Errorf("the new bridge holds %s, which no claim has", devs[1].ID)
	}
}

// A device of a claim the other bridge of a rolling update prepared,
// whose pool discovery no longer lists, is reported unhealthy by this
// one too (Health): the kubelet forgets the old bridge's reports when it
// stops, and hears of the device from the new one alone.
func TestRollingUpdateReportsTheOtherBridgesGoneDevices(t *testing.T) {
	r := newRig(t, 1)
	oldPod, newPod := rollingPair(t, r)
	dev := r.devices[0]
	if _, err := oldPod.Prepare(context.Background(), claim("a", result{"cdi.local", "n/tty-generic", dev})); err != nil {
		t.Fatal(err)
	}
	pool := PoolName(newPod.Node, "tty-generic")
	for _, h := range newPod.Health(nil, time.Now()) {
		if h.Pool == pool && h.Name == dev {
			if h.Health != dra.Unhealthy {
				t.Errorf("the new bridge reports %s/%s %s, want %s", h.Pool, h.Name, h.Health, dra.Unhealthy)
			}
			return
		}
	}
	t.Errorf("the new bridge does not report %s/%s, gone, which the old one prepared: %v", pool, dev, newPod.Health(nil, time.Now()))
}

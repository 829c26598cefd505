package reclaim

import (
	"slices"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
)

func TestClaimed(t *testing.T) {
	ins := []instance.Instance{
		{Name: "cam-1", Config: "cam", Capacity: 4, Usage: map[string]string{
			"cam-1-0": "a", "cam-1-1": "C:3:a", "cam-1-2": "b", "cam-1-3": "",
		}},
		{Name: "cam-2", Config: "cam", Capacity: 2, Usage: map[string]string{"cam-2-0": "C:x:b", "cam-2-1": "bad:value"}},
	}
	got := Claimed(ins, "a", "cdi.local")
	slices.SortFunc(got, func(x, y Slot) int { return compare(x.Claim.Slot, y.Claim.Slot) })
	want := []Slot{
		{Claim: instance.Claim{Instance: "cam-1", Slot: "cam-1-0", Value: "a"}, Pool: "cam", Resource: "cdi.local/cam-1", DeviceID: "cam-1-0"},
		{Claim: instance.Claim{Instance: "cam-1", Slot: "cam-1-1", Value: "C:3:a"}, Pool: "cam", Resource: "cdi.local/cam", DeviceID: "3"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Claimed = %+v\nwant %+v", got, want)
	}
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestTrackerGrace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	il := Slot{Claim: instance.Claim{Instance: "i", Slot: "i-0", Value: "a"}, Resource: "d/i", DeviceID: "i-0"}
	cl := Slot{Claim: instance.Claim{Instance: "i", Slot: "i-1", Value: "C:0:a"}, Resource: "d/pool", DeviceID: "0"}
	none, both := Held{}, Held{"d/i": {"i-0": true}, "d/pool": {"0": true}}
	onlyIL := Held{"d/i": {"i-0": true}}
	steps := []struct {
		after time.Duration
		held  Held
		want  []string // due slots
	}{
		{0, none, nil},                             // both go missing now
		{4 * time.Minute, onlyIL, nil},             // il is back; cl missing for 4m
		{5 * time.Minute, onlyIL, []string{"i-1"}}, // cl missing for the grace
		{6 * time.Minute, both, nil},               // cl held again: forgotten
		{7 * time.Minute, none, nil},               // both missing again, timers restart
		{11*time.Minute + 59*time.Second, none, nil},
		{12 * time.Minute, none, []string{"i-0", "i-1"}},
	}
	tr := NewTracker(5 * time.Minute)
	for _, st := range steps {
		var got []string
		for _, s := range tr.Due(t0.Add(st.after), []Slot{il, cl}, &Pods{Devices: st.held}) {
			got = append(got, s.Claim.Slot)
		}
		if !slices.Equal(got, st.want) {
			t.Fatalf("at +%v: due %v, want %v", st.after, got, st.want)
		}
	}
	if tr.Due(t0.Add(13*time.Minute), nil, &Pods{Devices: none}); len(tr.missing) != 0 {
		t.Fatalf("slots no longer claimed are still tracked: %v", tr.missing)
	}
}

// A slot whose last holder ended goes at once, if no container holds it
// then; one whose holder the Tracker never saw, or whose holder has not
// ended, waits for the grace: the kubelet may not list a pod's devices
// for a while (its restart), and only a pod known ended cuts that short.
// A slot released is forgotten: claimed again under the same value, it
// starts anew.
func TestTrackerEndedHolder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := Slot{Claim: instance.Claim{Instance: "i", Slot: "i-0", Value: "n"}, Resource: "d/i", DeviceID: "i-0"}
	b := Slot{Claim: instance.Claim{Instance: "i", Slot: "i-1", Value: "n"}, Resource: "d/i", DeviceID: "i-1"}
	c := Slot{Claim: instance.Claim{Instance: "i", Slot: "i-2", Value: "n"}, Resource: "d/i", DeviceID: "i-2"}
	holding := &Pods{Devices: Held{"d/i": {"i-0": true, "i-1": true}},
		Holders: map[string]map[string]string{"d/i": {"i-0": "ns/ended", "i-1": "ns/running"}}}
	tr := NewTracker(5 * time.Minute)
	if due := tr.Due(t0, []Slot{a, b, c}, holding); len(due) != 0 {
		t.Fatalf("while held: due %v", due)
	}
	if got := tr.unlistedHolders(map[string]bool{"ns/running": true}); !slices.Equal(got, []string{"ns/ended"}) {
		t.Errorf("holders the kubelet no longer lists: %v, want ns/ended", got)
	}
	if n := tr.holderEnded("ns/ended"); n != 1 {
		t.Errorf("marked %d slots of ns/ended, want 1", n)
	}
	none := &Pods{Devices: Held{}}
	var got []string
	for _, s := range tr.Due(t0.Add(time.Second), []Slot{a, b, c}, none) {
		got = append(got, s.Claim.Slot)
	}
	if !slices.Equal(got, []string{"i-0"}) {
		t.Errorf("a second after: due %v, want i-0 alone (its holder ended; i-1's runs, i-2's was never seen)", got)
	}
	tr.Released(a.Claim)
	if due := tr.Due(t0.Add(2*time.Second), []Slot{a, b, c}, none); len(due) != 0 {
		t.Errorf("i-0 claimed again under its value after its release: due %v at once, want it to start anew", due)
	}
	got = nil
	for _, s := range tr.Due(t0.Add(5*time.Minute+time.Second), []Slot{b, c}, none) {
		got = append(got, s.Claim.Slot)
	}
	if !slices.Equal(got, []string{"i-1", "i-2"}) {
		t.Errorf("after the grace: due %v, want i-1 and i-2", got)
	}
	if tr.Due(t0.Add(6*time.Minute), nil, none); len(tr.holder) != 0 || len(tr.ended) != 0 {
		t.Errorf("slots no longer claimed are still kept: holders %v, ended %v", tr.holder, tr.ended)
	}
}

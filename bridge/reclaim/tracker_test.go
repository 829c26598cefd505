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
		for _, s := range tr.Due(t0.Add(st.after), []Slot{il, cl}, st.held) {
			got = append(got, s.Claim.Slot)
		}
		if !slices.Equal(got, st.want) {
			t.Fatalf("at +%v: due %v, want %v", st.after, got, st.want)
		}
	}
	if tr.Due(t0.Add(13*time.Minute), nil, none); len(tr.missing) != 0 {
		t.Fatalf("slots no longer claimed are still tracked: %v", tr.missing)
	}
}

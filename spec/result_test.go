package spec

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestInfoResultJSON(t *testing.T) {
	zero := 0
	r := InfoResult{CDIVersion: "0.1.0", Counts: map[string]int{"gpu": 2, "gpu-render": 1},
		Devices: []DeviceInfo{{ID: "0000:03:00.0", Resource: "gpu", NUMANode: &zero, Healthy: true, Capacity: 1,
			DeviceNodes: []DeviceNode{{HostPath: "/dev/dri/card1"}}}},
		Skipped: map[string]int{SkipBadPath: 2, SkipOutsideRoot: 1}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back InfoResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, r)
	}
	old, _ := json.Marshal(r.ForVersion(Version001))
	if string(old) != `{"cdiVersion":"0.0.1","gpu":2,"gpu-render":1}` {
		t.Fatalf("0.0.1 INFO = %s", old)
	}
	if err := json.Unmarshal([]byte(`{"cdiVersion":"0.0.1","tty":"x"}`), &back); err == nil {
		t.Fatal("a non-integer count was accepted")
	}
	if err := json.Unmarshal([]byte(`{"cdiVersion":"0.1.0","skipped_devices":{"bad-id":"x"}}`), &back); err == nil {
		t.Fatal("a non-integer skipped count was accepted")
	}
}

// TestInfoResultSkipped: skipped_devices is written in 0.2.0 when a
// device was skipped, never before 0.2.0 (a caller of 0.1.0 may not know
// it), and not when none was.
func TestInfoResultSkipped(t *testing.T) {
	r := InfoResult{Counts: map[string]int{"tty": 1}, Skipped: map[string]int{SkipBadID: 3}}
	for _, tc := range []struct {
		r    InfoResult
		want string
	}{
		{r.ForVersion(Version020), `{"cdiVersion":"0.2.0","device_inventory":[],"skipped_devices":{"bad-id":3},"tty":1}`},
		{r.ForVersion(Version010), `{"cdiVersion":"0.1.0","device_inventory":[],"tty":1}`},
		{r.ForVersion(Version002), `{"cdiVersion":"0.0.2","tty":1}`},
		{InfoResult{Counts: map[string]int{"tty": 1}, Skipped: map[string]int{}}.ForVersion(Version020), `{"cdiVersion":"0.2.0","device_inventory":[],"tty":1}`},
	} {
		if b, _ := json.Marshal(tc.r); string(b) != tc.want {
			t.Errorf("got  %s\nwant %s", b, tc.want)
		}
	}
}

// TestInfoResultIgnoresUnknownNonCounts: a member with an underscore is
// no count, and one this package does not know is ignored, so that a
// later version's member does not fail INFO.
func TestInfoResultIgnoresUnknownNonCounts(t *testing.T) {
	var got InfoResult
	if err := json.Unmarshal([]byte(`{"cdiVersion":"0.1.0","tty":2,"future_member":{"a":[1]},"device_inventory":[]}`), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Counts) != 1 || got.Counts["tty"] != 2 {
		t.Fatalf("counts %v, want tty alone", got.Counts)
	}
}

func TestCheckSkipReason(t *testing.T) {
	for s, ok := range map[string]bool{
		"bad-path": true, "a": true, "x9-": true, "abcdefghijklmnopqrstuvwxyz012345": true,
		"": false, "9a": false, "-a": false, "Bad": false, "bad_id": false, "bad id": false, "abcdefghijklmnopqrstuvwxyz0123456": false,
	} {
		if err := CheckSkipReason(s); (err == nil) != ok {
			t.Errorf("CheckSkipReason(%q) = %v, want ok %v", s, err, ok)
		}
	}
	for _, s := range []string{SkipBadPath, SkipNotDeviceNode, SkipOutsideRoot, SkipBadID, SkipUnreadable} {
		if err := CheckSkipReason(s); err != nil {
			t.Errorf("the named reason %q: %v", s, err)
		}
	}
}

func TestAddResultForVersion(t *testing.T) {
	r := AddResult{Devices: []string{"/dev/tty13"}, NUMALocality: []int{0}, CDIDevices: []string{"a.b/tty=tty13"},
		Units: []Unit{{Resource: "tty", Device: "tty13"}}}
	b, _ := json.Marshal(r.ForVersion(Version001))
	if string(b) != `{"cdiVersion":"0.0.1","devices":["/dev/tty13"],"numa_locality":[0]}` {
		t.Fatalf("0.0.1 ADD = %s", b)
	}
	b, _ = json.Marshal(AddResult{}.ForVersion(Version002))
	if string(b) != `{"cdiVersion":"0.0.2","devices":[]}` {
		t.Fatalf("empty ADD = %s", b)
	}
	if got := r.ForVersion(Version010); len(got.Units) != 1 || len(got.CDIDevices) != 1 {
		t.Fatalf("0.1.0 ADD lost members: %+v", got)
	}
}

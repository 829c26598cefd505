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
			DeviceNodes: []DeviceNode{{HostPath: "/dev/dri/card1"}}}}}
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

package store

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
)

func TestReconcileBoot(t *testing.T) {
	tests := []struct {
		name        string
		stored, now string
		wantDropped []string
		wantBoot    string
	}{
		{"same boot", "a", "a", nil, "a"},
		{"reboot", "a", "b", []string{"r1", "r2"}, "b"},
		{"first write", "", "b", nil, "b"},
		{"boot id unknown now", "a", "", nil, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState(tt.stored)
			st.Allocations["r2"] = &Record{Request: "tty=1"}
			st.Allocations["r1"] = &Record{Request: "tty=1"}
			st.ReconcileBoot(tt.now)
			if !slices.Equal(st.Dropped, tt.wantDropped) || st.BootID != tt.wantBoot {
				t.Fatalf("dropped %v, boot %q; want %v, %q", st.Dropped, st.BootID, tt.wantDropped, tt.wantBoot)
			}
			if kept := len(st.Allocations); kept != 2-len(tt.wantDropped) {
				t.Errorf("%d allocations kept", kept)
			}
		})
	}
}

// TestEncodeMatchesEncodingJSON holds Encode and Decode to what
// encoding/json makes of State's json tags, so that a field added to a
// stored type without its reader and writer learning of it fails here.
func TestEncodeMatchesEncodingJSON(t *testing.T) {
	created := time.Date(2026, 11, 23, 10, 0, 0, 123, time.FixedZone("x", 3600))
	st := NewState("boot-<a>")
	st.Allocations["r1"] = &Record{Request: "gpu:2", Devices: []string{"a", "b"}, NUMANodes: []int{0, 1}, Created: created,
		Result: spec.AddResult{CDIVersion: "0.1.0", Devices: []string{"/dev/a"}, NUMALocality: []int{1},
			DeviceNodes: []spec.DeviceNode{{HostPath: "/dev/a", ContainerPath: "/dev/b", Permissions: "rw"}},
			Env:         map[string]string{"Z": "1", "A": "\"quoted\"\n"}, Mounts: []spec.Mount{{HostPath: "/h", ContainerPath: "/c", ReadOnly: true}},
			Annotations: map[string]string{"k": "v"}, CDIDevices: []string{"cdi.local/gpu=a"},
			Units: []spec.Unit{{Resource: "gpu", Device: "a", Slot: 3}}}}
	st.Allocations["r0"] = &Record{Request: "gpu:1", Created: created, Result: spec.AddResult{CDIVersion: "0.1.0", Devices: []string{}}}
	got, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	unescape := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")
	if unescape.Replace(string(got)) != unescape.Replace(string(want))+"\n" {
		t.Errorf("Encode:\n%s\nencoding/json:\n%s", got, want)
	}
	back, err := Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	var viaJSON State
	if err := json.Unmarshal(got, &viaJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, &viaJSON) {
		t.Errorf("Decode gave %+v\nencoding/json %+v", back, &viaJSON)
	}
}

// Documents no plugin could have written, each of which would make a held
// slot look free, are refused on load.
func TestDecodeRefusesWhatCouldNotHaveBeenWritten(t *testing.T) {
	rec := func(dev string, slot int) string {
		return `{"request":"tty:1","created":"2026-11-23T10:00:00Z","result":{"cdiVersion":"0.1.0","devices":[],"units":[{"resource":"tty","device":"` +
			dev + `","slot":` + strconv.Itoa(slot) + `}]}}`
	}
	doc := func(allocs string) string { return `{"format":1,"bootID":"b","allocations":{` + allocs + `}}` }
	for _, tc := range []struct{ name, doc, want string }{
		{"negative slot", doc(`"r1":` + rec("tty13", -1)), "negative"},
		{"slot held twice", doc(`"r1":` + rec("tty13", 0) + `,"r2":` + rec("tty13", 0)), `"r1" and "r2" both hold slot 0`},
		{"request-id twice", doc(`"r1":` + rec("tty13", 0) + `,"r1":` + rec("tty14", 0)), `"r1" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode = %v, want an error saying %s", err, tc.want)
			}
		})
	}
	ok := doc(`"r1":` + rec("tty13", 0) + `,"r2":` + rec("tty13", 1) + `,"r3":` + rec("tty14", 0))
	if _, err := Decode([]byte(ok)); err != nil {
		t.Errorf("Decode of a valid document: %v", err)
	}
}

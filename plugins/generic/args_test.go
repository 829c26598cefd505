package main

import (
	"errors"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// TestParseGroupsRefuses checks that args.groups is read strictly: unknown
// members and values of the wrong type are refused as invalid
// configuration while decoding (wrapping jsonread.ErrType), and values
// that decode but fail the checks are refused without it.
func TestParseGroupsRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, args string
		wantType   bool // the error is a decoding error
	}{
		{"unknown member", `{"groups":[{"name":"a","paths":["/dev/a"],"perDevices":"all"}]}`, true},
		{"unknown member in a later group", `{"groups":[{"name":"a","paths":["/dev/a"]},{"name":"b","paths":["/dev/b"],"mode":"x"}]}`, true},
		{"member names are case-sensitive", `{"groups":[{"name":"a","Paths":["/dev/a"]}]}`, true},
		{"paths as a string", `{"groups":[{"name":"a","paths":"/dev/a"}]}`, true},
		{"paths as an object", `{"groups":[{"name":"a","paths":{"p":"/dev/a"}}]}`, true},
		{"number in paths", `{"groups":[{"name":"a","paths":["/dev/a",5]}]}`, true},
		{"null in paths", `{"groups":[{"name":"a","paths":[null]}]}`, true},
		{"name as a number", `{"groups":[{"name":5,"paths":["/dev/a"]}]}`, true},
		{"perDevice as a bool", `{"groups":[{"name":"a","paths":["/dev/a"],"perDevice":true}]}`, true},
		{"permissions as a number", `{"groups":[{"name":"a","paths":["/dev/a"],"permissions":6}]}`, true},
		{"group as a number", `{"groups":[5]}`, true},
		{"group as a list", `{"groups":[["/dev/a"]]}`, true},
		{"group as a string", `{"groups":["/dev/a"]}`, true},
		{"groups null", `{"groups":null}`, false},
		{"groups as a string", `{"groups":"/dev/a"}`, true},
		{"null group", `{"groups":[null]}`, false},
		{"paths null", `{"groups":[{"name":"a","paths":null}]}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := host(t, fstest.MapFS{}, tt.args)
			groups, err := parseGroups(h.Config)
			if spec.CodeOf(err) != spec.CodeInvalidConfig {
				t.Fatalf("groups %+v, error %v, want code %d", groups, err, spec.CodeInvalidConfig)
			}
			if got := errors.Is(err, jsonread.ErrType); got != tt.wantType {
				t.Fatalf("error %v: wraps jsonread.ErrType %v, want %v", err, got, tt.wantType)
			}
		})
	}
}

// TestParseGroupsReads checks the values read, nulls, and the defaults.
func TestParseGroupsReads(t *testing.T) {
	for _, tt := range []struct {
		name, args string
		want       []group
	}{
		{"all members", `{"groups":[{"name":"snd","paths":["/dev/snd/*","/dev/dsp"],"perDevice":"all","permissions":"rwm"}]}`,
			[]group{{Name: "snd", Paths: []string{"/dev/snd/*", "/dev/dsp"}, PerDevice: perAll, Permissions: "rwm",
				resource: spec.ResourceSpec{Type: "dev", Subtype: "snd"}}}},
		{"defaults", `{"groups":[{"name":"a","paths":["/dev/a"]}]}`,
			[]group{{Name: "a", Paths: []string{"/dev/a"}, PerDevice: perGlob, Permissions: "rw",
				resource: spec.ResourceSpec{Type: "dev", Subtype: "a"}}}},
		{"null members take the defaults", `{"groups":[{"name":null,"paths":["/dev/a"],"perDevice":null,"permissions":null}]}`,
			[]group{{Paths: []string{"/dev/a"}, PerDevice: perGlob, Permissions: "rw",
				resource: spec.ResourceSpec{Type: "dev"}}}},
		{"order kept", `{"groups":[{"name":"b","paths":["/dev/b"]},{"name":"a","paths":["/dev/a"],"perDevice":"glob","permissions":"r"}]}`,
			[]group{
				{Name: "b", Paths: []string{"/dev/b"}, PerDevice: perGlob, Permissions: "rw", resource: spec.ResourceSpec{Type: "dev", Subtype: "b"}},
				{Name: "a", Paths: []string{"/dev/a"}, PerDevice: perGlob, Permissions: "r", resource: spec.ResourceSpec{Type: "dev", Subtype: "a"}},
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := host(t, fstest.MapFS{}, tt.args)
			got, err := parseGroups(h.Config)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("groups %+v, want %+v", got, tt.want)
			}
		})
	}
}

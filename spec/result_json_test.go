package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec/jsonread"
	"github.com/cdiexec/cdi/spec/jsonwrite"
)

// fill sets every exported field of the value v points to, recursively, so
// that every field takes part in the comparisons below. Strings carry characters that need escaping.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d \"<&>\"\n\u2028", depth))
	case reflect.Int:
		v.SetInt(int64(7 + depth))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), depth+i+1)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			k.SetString(fmt.Sprintf("k%d", 1-i))
			fill(e, depth+1)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 23, 10, 4, 5, 600, time.FixedZone("x", 3600))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	default:
		panic("fill: add a case for " + v.Kind().String())
	}
}

func filled[T any]() *T {
	var x T
	fill(reflect.ValueOf(&x).Elem(), 0)
	return &x
}

// TestWriteMatchesEncodingJSON holds jsonwrite, which the plugins write
// their documents with, to what encoding/json writes of every wire type,
// filled and empty.
func TestWriteMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"VersionResult", *filled[VersionResult]()}, {"VersionResult zero", VersionResult{}},
		{"Error", filled[Error]()}, {"Error zero", &Error{}},
		{"AddResult", *filled[AddResult]()}, {"AddResult zero", AddResult{}},
		{"AddResult empty lists", AddResult{Devices: []string{}, NUMALocality: []int{}, Env: map[string]string{}, Units: []Unit{}}},
		{"Mount read-write", &Mount{HostPath: "/a"}},
		{"InfoResult", *filled[InfoResult]()}, {"InfoResult zero", InfoResult{}},
		{"InfoResult empty inventory", InfoResult{CDIVersion: "0.1.0", Devices: []DeviceInfo{{}}}},
		{"ListResult", *filled[ListResult]()}, {"ListResult zero", ListResult{}},
		{"GCResult", *filled[GCResult]()}, {"GCResult zero", GCResult{}},
		{"Config", Config{CDIVersion: "0.1.0", Args: json.RawMessage(`{ "a" : 1 }`), Bytes: []byte("x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jsonwrite.MarshalIndent(tc.v, "  ")
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(tc.v); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("jsonwrite:\n%s\nencoding/json:\n%s", got, want.Bytes())
			}
		})
	}
}

// TestReadMatchesEncodingJSON holds jsonread, which the plugins read
// documents with, to what encoding/json reads from the same document, for
// every wire type: both follow the json tags.
func TestReadMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   any
		out  func() any // a new value to read into
	}{
		{"AddResult", filled[AddResult](), func() any { return &AddResult{} }},
		{"AddResult zero", &AddResult{}, func() any { return &AddResult{} }},
		{"AddResult empty lists", &AddResult{Devices: []string{}, Units: []Unit{}}, func() any { return &AddResult{} }},
		{"ListResult", filled[ListResult](), func() any { return &ListResult{} }},
		{"DeviceInfo", filled[DeviceInfo](), func() any { return &DeviceInfo{} }},
		{"DeviceInfo zero", &DeviceInfo{}, func() any { return &DeviceInfo{} }},
		{"VersionResult", filled[VersionResult](), func() any { return &VersionResult{} }},
		{"GCResult", filled[GCResult](), func() any { return &GCResult{} }},
		{"Error", filled[Error](), func() any { return &Error{} }},
		{"Config", &Config{CDIVersion: "0.1.0", Name: "n", Type: "gpu", Plugin: "drm", Args: json.RawMessage(`{"a":[1,{"b":null}]}`)}, func() any { return &Config{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.out()
			if err := json.Unmarshal(data, want); err != nil {
				t.Fatal(err)
			}
			v, err := jsonread.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			got := tc.out()
			if err := jsonread.Read(v, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("jsonread.Read gave %+v, encoding/json %+v", got, want)
			}
		})
	}
}

// TestInfoResultLayout: the counts are members beside cdiVersion, all in
// key order, and <, > and & stay as they are, as in every other document.
func TestInfoResultLayout(t *testing.T) {
	r := InfoResult{CDIVersion: "0.1.0", Counts: map[string]int{"gpu": 2, "dev-serial": 1},
		Devices: []DeviceInfo{{ID: "a<&>", Resource: "gpu", DeviceNodes: []DeviceNode{}}}}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // as skel writes it
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		t.Fatal(err)
	}
	got := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	want := `{"cdiVersion":"0.1.0","dev-serial":1,"device_inventory":[{"id":"a<&>","resource":"gpu","deviceNodes":[],` +
		`"healthy":false,"capacity":0,"used":0,"shared":false}],"gpu":2}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestInfoResultRoundTrip(t *testing.T) {
	for name, in := range map[string]InfoResult{
		"filled": *filled[InfoResult](), "no inventory": {CDIVersion: "0.0.1", Counts: map[string]int{"gpu": 2}},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			var got InfoResult
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, in) {
				t.Errorf("round trip gave %+v, want %+v", got, in)
			}
		})
	}
}

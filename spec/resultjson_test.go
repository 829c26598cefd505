package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec/plainjson"
)

// jsonWriter is what every document a plugin prints implements.
type jsonWriter interface{ WriteJSON(*plainjson.Writer) }

// write writes v as the plugins do: a document by its WriteJSON, any other
// type by its table.
func write(w *plainjson.Writer, v any) {
	if doc, ok := v.(jsonWriter); ok {
		doc.WriteJSON(w)
		return
	}
	w.Object(v.(plainjson.Described))
}

// fill sets every exported field of the value v points to, recursively, so
// that a field added to a type without its table learning of it makes
// the comparison below fail. Strings carry characters that need escaping.
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

func encodingJSON(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

func TestWriteJSONMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
	}{
		// InfoResult's MarshalJSON goes through json.Marshal, which escapes
		// <, > and & whatever the encoder says; sameJSON allows for that.
		{"VersionResult", *filled[VersionResult]()}, {"VersionResult zero", VersionResult{}},
		{"Error", filled[Error]()}, {"Error zero", &Error{}},
		{"AddResult", *filled[AddResult]()}, {"AddResult zero", AddResult{}},
		{"AddResult empty lists", AddResult{Devices: []string{}, NUMALocality: []int{}, Env: map[string]string{}, Units: []Unit{}}},
		{"Mount read-write", &Mount{HostPath: "/a"}},
		{"InfoResult", *filled[InfoResult]()}, {"InfoResult zero", InfoResult{}},
		{"InfoResult empty inventory", InfoResult{CDIVersion: "0.1.0", Devices: []DeviceInfo{{}}}},
		{"ListResult", *filled[ListResult]()}, {"ListResult zero", ListResult{}},
		{"GCResult", *filled[GCResult]()}, {"GCResult zero", GCResult{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := plainjson.NewWriter("  ")
			write(w, tc.v)
			got, want := string(w.Bytes()), encodingJSON(t, tc.v)
			if !sameJSON(t, got, want) {
				t.Errorf("plainjson:\n%s\nencoding/json:\n%s", got, want)
			}
		})
	}
}

// sameJSON reports whether a and b are the same document, byte for byte
// but for \u003c, \u003e and \u0026 escapes, which are the same text.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	unescape := func(s string) string {
		return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(s)
	}
	return unescape(a) == unescape(b)
}

// TestReadMatchesEncodingJSON holds plainjson.Read, following each
// type's table, to what encoding/json reads from the same document.
func TestReadMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   plainjson.Described
		out  func() plainjson.Described // a new value to read into
	}{
		{"AddResult", filled[AddResult](), func() plainjson.Described { return &AddResult{} }},
		{"AddResult zero", &AddResult{}, func() plainjson.Described { return &AddResult{} }},
		{"AddResult empty lists", &AddResult{Devices: []string{}, Units: []Unit{}}, func() plainjson.Described { return &AddResult{} }},
		{"ListResult", filled[ListResult](), func() plainjson.Described { return &ListResult{} }},
		{"DeviceInfo", filled[DeviceInfo](), func() plainjson.Described { return &DeviceInfo{} }},
		{"DeviceInfo zero", &DeviceInfo{}, func() plainjson.Described { return &DeviceInfo{} }},
		{"VersionResult", filled[VersionResult](), func() plainjson.Described { return &VersionResult{} }},
		{"GCResult", filled[GCResult](), func() plainjson.Described { return &GCResult{} }},
		{"Error", filled[Error](), func() plainjson.Described { return &Error{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := plainjson.NewWriter("")
			w.Object(tc.in)
			want := tc.out()
			if err := json.Unmarshal(w.Bytes(), want); err != nil {
				t.Fatal(err)
			}
			v, err := plainjson.Parse(w.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			got := tc.out()
			if err := plainjson.Read(v, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("plainjson.Read gave %+v, encoding/json %+v", got, want)
			}
		})
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

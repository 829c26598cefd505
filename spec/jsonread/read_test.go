package jsonread

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		ok       bool
	}{
		{"object", ` {"a":[1,-2.5e+3,true,false,null,"x\"y\u00e9"],"b":{}} `, true},
		{"nested to the limit", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), true},
		{"nested past the limit", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), false},
		{"brackets in strings do not nest", `[` + strings.Repeat(`"[{",`, 100) + `"\"["]`, true},
		{"a megabyte of brackets", strings.Repeat("[", 1<<20), false},
		{"trailing data", `{} {}`, false},
		{"trailing comma", `[1,]`, false},
		{"leading zero", `01`, false},
		{"bad escape", `"\x"`, false},
		{"control character", "\"\x01\"", false},
		{"empty", ``, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrNotJSON)) {
				t.Errorf("Parse = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

type inner struct {
	ID string `json:"id"`
}

type doc struct {
	S       string            `json:"s"`
	N       int               `json:"n,omitempty"`
	B       bool              `json:"b"`
	P       *int              `json:"p"`
	L       []string          `json:"l"`
	M       map[string]string `json:"m"`
	Objs    map[string]*inner `json:"objs"`
	O       inner             `json:"o"`
	Os      []inner           `json:"os"`
	T       time.Time         `json:"t"`
	Raw     json.RawMessage   `json:"raw"`
	Skipped string            `json:"-"`
	Untaged string
}

func read(t *testing.T, in string, strict bool) (doc, error) {
	t.Helper()
	v, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	d := doc{S: "default", N: 3, O: inner{"default"}}
	if strict {
		return d, ReadStrict(v, &d)
	}
	return d, Read(v, &d)
}

func TestRead(t *testing.T) {
	seven := 7
	when := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name, in string
		want     doc
	}{
		{"nothing: the defaults", `{}`, doc{S: "default", N: 3, O: inner{"default"}}},
		{"null members: the defaults and nil", `{"s":null,"n":null,"b":null,"p":null,"l":null,"m":null,"o":null,"t":null}`,
			doc{S: "default", N: 3, O: inner{"default"}}},
		{"values", `{"s":"x\u00e9","n":-2,"b":true,"p":7,"l":[],"m":{"k":"v"},"objs":{"a":{"id":"1"},"b":null},"o":{"id":"x"},` +
			`"os":[{"id":"y"},null],"t":"2026-11-23T10:00:00Z","raw":{"a": [1]},"Untaged":"u"}`,
			doc{S: "xé", N: -2, B: true, P: &seven, L: []string{}, M: map[string]string{"k": "v"},
				Objs: map[string]*inner{"a": {"1"}, "b": nil}, O: inner{"x"}, Os: []inner{{"y"}, {}}, T: when,
				Raw: json.RawMessage(`{"a": [1]}`), Untaged: "u"}},
		{"unknown and differently cased members are skipped", `{"S":"x","-":"y","Skipped":"z","other":[1]}`,
			doc{S: "default", N: 3, O: inner{"default"}}},
		{"the last of a repeated member counts", `{"s":"a","s":"b"}`, doc{S: "b", N: 3, O: inner{"default"}}},
		{"bytes that are not UTF-8 read as U+FFFD, as encoding/json reads them", "{\"s\":\"a\xb2\xffb\",\"m\":{\"\xb2\":\"\xc3\"}}",
			doc{S: "a\ufffd\ufffdb", N: 3, M: map[string]string{"\ufffd": "\ufffd"}, O: inner{"default"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := read(t, tt.in, false)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		strict   bool
		path     string // where the error names, "" for none
	}{
		{"number for a string", `{"s":1}`, false, "s"},
		{"fraction", `{"n":2.0}`, false, "n"},
		{"exponent", `{"n":1e3}`, false, "n"},
		{"overflow", `{"n":99999999999999999999}`, false, "n"},
		{"string for a bool", `{"b":"true"}`, false, "b"},
		{"object for a list", `{"l":{}}`, false, "l"},
		{"null in a list of strings", `{"l":["a",null]}`, false, "l[1]"},
		{"null in a map of strings", `{"m":{"k":null}}`, false, "m.k"},
		{"a key twice in a map", `{"m":{"k":"a","k":"b"}}`, false, "m"},
		{"a key twice in a map of objects", `{"objs":{"a":{},"a":null}}`, false, "objs"},
		{"not a time", `{"t":"yesterday"}`, false, "t"},
		{"wrong kind deep inside", `{"os":[{"id":"a"},{"id":7}]}`, false, "os[1].id"},
		{"unknown member, strictly", `{"o":{"id":"x","ID":"y"}}`, true, "o"},
		{"unknown top-level member, strictly", `{"S":"x"}`, true, ""},
		{"an array for the document", `[]`, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := read(t, tt.in, tt.strict)
			if !errors.Is(err, ErrType) {
				t.Fatalf("error %v, want one wrapping ErrType", err)
			}
			path := ""
			if pe := (*PathError)(nil); errors.As(err, &pe) {
				path = pe.Path
			}
			if path != tt.path {
				t.Errorf("error %v at %q, want it at %q", err, path, tt.path)
			}
		})
	}
}

// A document that is a string or a number refuses null, where a member's
// null leaves the value as it was: an arg that is given must say
// something.
func TestReadNullDocument(t *testing.T) {
	v, _ := Parse([]byte(`null`))
	s, n, l := "default", 3, []string{"x"}
	if err := Read(v, &s); !errors.Is(err, ErrType) {
		t.Errorf("string: %v", err)
	}
	if err := Read(v, &n); !errors.Is(err, ErrType) {
		t.Errorf("int: %v", err)
	}
	if err := Read(v, &l); err != nil || l != nil {
		t.Errorf("list: %v, %v", l, err)
	}
}

func TestAt(t *testing.T) {
	err := At("groups", AtIndex(1, At("paths", AtIndex(0, errors.New("bad")))))
	if got := err.Error(); got != "groups[1].paths[0]: bad" {
		t.Errorf("got %q", got)
	}
}

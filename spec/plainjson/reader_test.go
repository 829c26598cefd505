package plainjson

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// record is read by readRecord, the way the plugins read their documents.
type record struct {
	Name  string
	N     int
	On    bool
	Tags  []string
	Nums  []int
	Env   map[string]string
	At    time.Time
	Inner []int
}

func readRecord(data string, strict bool) (record, error) {
	var r record
	v, err := Parse([]byte(data))
	if err != nil {
		return r, err
	}
	err = Object(v, Fields{
		"name": String(&r.Name), "n": Int(&r.N), "on": Bool(&r.On), "tags": Strings(&r.Tags),
		"nums": Ints(&r.Nums), "env": StringMap(&r.Env), "at": Time(&r.At),
	}, strict)
	return r, err
}

func TestReaders(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 5, time.UTC)
	for _, tc := range []struct {
		name, in string
		strict   bool
		want     record
		wantErr  error // nil: must succeed; errAny: any error
	}{
		{name: "all fields", in: `{"name":"a","n":-3,"on":true,"tags":["x"],"nums":[1,2],"env":{"K":"v"},"at":"2026-11-23T10:00:00.000000005Z"}`,
			want: record{Name: "a", N: -3, On: true, Tags: []string{"x"}, Nums: []int{1, 2}, Env: map[string]string{"K": "v"}, At: at}},
		{name: "nulls keep zero values", in: `{"name":null,"n":null,"on":null,"tags":null,"nums":null,"env":null,"at":null}`},
		{name: "empty lists stay empty, not nil", in: `{"tags":[],"nums":[]}`, want: record{Tags: []string{}, Nums: []int{}}},
		{name: "null document", in: `null`},
		{name: "unknown field skipped", in: `{"other":1,"name":"a"}`, want: record{Name: "a"}},
		{name: "unknown field refused when strict", in: `{"other":1}`, strict: true, wantErr: ErrType},
		{name: "string for int", in: `{"n":"1"}`, wantErr: ErrType},
		{name: "fraction for int", in: `{"n":1.5}`, wantErr: ErrType},
		{name: "1.0 is not an int", in: `{"n":1.0}`, wantErr: ErrType},
		{name: "exponent is not an int", in: `{"n":1e3}`, wantErr: ErrType},
		{name: "overflowing int", in: `{"n":99999999999999999999}`, wantErr: ErrType},
		{name: "number for string", in: `{"name":1}`, wantErr: ErrType},
		{name: "string for bool", in: `{"on":"true"}`, wantErr: ErrType},
		{name: "number in strings", in: `{"tags":["a",1]}`, wantErr: ErrType},
		{name: "object for array", in: `{"tags":{}}`, wantErr: ErrType},
		{name: "number in map", in: `{"env":{"K":1}}`, wantErr: ErrType},
		{name: "bad time", in: `{"at":"yesterday"}`, wantErr: ErrType},
		{name: "array document", in: `[]`, wantErr: ErrType},
		{name: "invalid JSON", in: `{"name":"a"`, wantErr: errAny},
		{name: "trailing data", in: `{} {}`, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readRecord(tc.in, tc.strict)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && !reflect.DeepEqual(got, tc.want):
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestErrorsNameTheMember(t *testing.T) {
	v, err := Parse([]byte(`{"list":[{"n":1},{"n":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	err = Object(v, Fields{"list": func(l gjson.Result) error {
		return Array(l, func(_ int, e gjson.Result) error {
			var n int
			return Object(e, Fields{"n": Int(&n)}, true)
		})
	}}, true)
	if want := `list: [1]: n: wrong JSON type: want an integer, got "x"`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

func TestIntPtrListAndMap(t *testing.T) {
	type item struct{ N int }
	readItem := func(it *item, v gjson.Result) error { return Object(v, Fields{"n": Int(&it.N)}, true) }
	zero := 0
	for _, tc := range []struct {
		name, in  string
		wantOpt   *int
		wantItems []item
		wantMap   map[string]item
		wantErr   string // a part of the error, which must wrap ErrType
	}{
		{name: "absent"},
		{name: "zero is kept apart from absent", in: `{"opt":0,"items":[],"byName":{}}`, wantOpt: &zero, wantItems: []item{}, wantMap: map[string]item{}},
		{name: "null", in: `{"opt":null,"items":null,"byName":null}`},
		{name: "values", in: `{"opt":5,"items":[{"n":1},{"n":2}],"byName":{"a":{"n":3},"b":{"n":4}}}`,
			wantOpt: func() *int { n := 5; return &n }(), wantItems: []item{{1}, {2}}, wantMap: map[string]item{"a": {3}, "b": {4}}},
		{name: "fraction", in: `{"opt":0.5}`, wantErr: "opt: "},
		{name: "bad element", in: `{"items":[{"n":1},{"m":2}]}`, wantErr: "items: [1]: "},
		{name: "object for list", in: `{"items":{}}`, wantErr: "items: "},
		{name: "bad member", in: `{"byName":{"a":{"n":1},"b":{"m":2}}}`, wantErr: "byName: b: "},
		{name: "list for map", in: `{"byName":[]}`, wantErr: "byName: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in == "" {
				in = "{}"
			}
			v, err := Parse([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			var opt *int
			var items []item
			var byName map[string]item
			err = Object(v, Fields{"opt": IntPtr(&opt), "items": List(&items, readItem), "byName": Map(&byName, readItem)}, true)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrType) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want ErrType naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(opt, tc.wantOpt) || !reflect.DeepEqual(items, tc.wantItems) || !reflect.DeepEqual(byName, tc.wantMap) {
				t.Fatalf("got %v %+v %+v, %v; want %v %+v %+v", opt, items, byName, err, tc.wantOpt, tc.wantItems, tc.wantMap)
			}
		})
	}
}

func TestParseDepth(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name string
		doc  string
		ok   bool
	}{
		{"at the limit", nest(MaxDepth), true},
		{"past the limit", nest(MaxDepth + 1), false},
		{"a megabyte of open brackets", strings.Repeat("[", 1<<20), false},
		{"brackets in strings do not count", `{"a":"` + strings.Repeat("[", 100) + `"}`, true},
		{"an escaped quote does not end the string", `["\"` + strings.Repeat("{", 100) + `"]`, true},
		{"an escaped backslash does", `["\\",` + nest(MaxDepth) + `]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.doc)); (err == nil) != tc.ok {
				t.Errorf("Parse = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

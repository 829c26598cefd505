package plainjson

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
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

// AppendMembers describes r to Read, as the plugins describe their documents.
func (r *record) AppendMembers(ms []Member) []Member {
	return append(ms,
		String("name", &r.Name), Int("n", &r.N), Bool("on", &r.On), Strings("tags", &r.Tags),
		Ints("nums", &r.Nums), StringMap("env", &r.Env), Time("at", &r.At),
	)
}

func readRecord(data string, strict bool) (record, error) {
	var r record
	v, err := Parse([]byte(data))
	if err != nil {
		return r, err
	}
	if strict {
		return r, ReadStrict(v, &r)
	}
	return r, Read(v, &r)
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

// list holds items, each an object with one integer: the nesting the
// tests of member names and of lists need.
type list struct {
	Items  []item
	Opt    *int
	ByName map[string]*item
}

type item struct {
	N int `json:"n"`
}

func (l *list) AppendMembers(ms []Member) []Member {
	return append(ms, Objects("items", &l.Items), IntPtr("opt", &l.Opt), ObjectMap("byName", &l.ByName))
}

func (it *item) AppendMembers(ms []Member) []Member { return append(ms, Int("n", &it.N)) }

func TestErrorsNameTheMember(t *testing.T) {
	v, err := Parse([]byte(`{"items":[{"n":1},{"n":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	err = ReadStrict(v, &list{})
	if want := `items[1].n: wrong JSON type: want an integer, got "x"`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}

func TestIntPtrObjectsAndMaps(t *testing.T) {
	zero := 0
	for _, tc := range []struct {
		name, in  string
		wantOpt   *int
		wantItems []item
		wantMap   map[string]*item
		wantErr   string // a part of the error, which wraps ErrType unless it is about a key twice
	}{
		{name: "absent"},
		{name: "zero is kept apart from absent", in: `{"opt":0,"items":[],"byName":{}}`, wantOpt: &zero, wantItems: []item{}, wantMap: map[string]*item{}},
		{name: "null", in: `{"opt":null,"items":null,"byName":null}`},
		{name: "values", in: `{"opt":5,"items":[{"n":1},{"n":2}],"byName":{"a":{"n":3},"b":null}}`,
			wantOpt: func() *int { n := 5; return &n }(), wantItems: []item{{1}, {2}}, wantMap: map[string]*item{"a": {3}, "b": nil}},
		{name: "null element reads as an empty object", in: `{"items":[null]}`, wantItems: []item{{}}},
		{name: "bad map member", in: `{"byName":{"a":{"n":1},"b":{"m":2}}}`, wantErr: "byName.b: "},
		{name: "list for map", in: `{"byName":[]}`, wantErr: "byName: "},
		{name: "key twice", in: `{"byName":{"a":{"n":1},"a":{"n":2}}}`, wantErr: `byName: "a" appears twice`},
		{name: "fraction", in: `{"opt":0.5}`, wantErr: "opt: "},
		{name: "bad element", in: `{"items":[{"n":1},{"m":2}]}`, wantErr: "items[1]: "},
		{name: "object for list", in: `{"items":{}}`, wantErr: "items: "},
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
			var got list
			err = ReadStrict(v, &got)
			if tc.wantErr != "" {
				wantType := !strings.Contains(tc.wantErr, "twice")
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, ErrType) != wantType {
					t.Fatalf("error %v, want one naming %q (wrapping ErrType: %v)", err, tc.wantErr, wantType)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, list{tc.wantItems, tc.wantOpt, tc.wantMap}) {
				t.Fatalf("got %+v, %v; want %v %+v %+v", got, err, tc.wantOpt, tc.wantItems, tc.wantMap)
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

// withRaw keeps one member as the text it was read as.
type withRaw struct{ Args []byte }

func (r *withRaw) AppendMembers(ms []Member) []Member {
	return append(ms, Raw("args", &r.Args).OmitEmpty())
}

func TestRaw(t *testing.T) {
	for _, tc := range []struct{ in, wantRaw, wantOut string }{
		{`{"args":{"a": [1, 2]}}`, `{"a": [1, 2]}`, `{"args":{"a": [1, 2]}}`},
		{`{"args":null}`, `null`, `{"args":null}`},
		{`{}`, ``, `{}`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			v, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var r withRaw
			if err := Read(v, &r); err != nil || string(r.Args) != tc.wantRaw {
				t.Fatalf("read %q, %v; want %q", r.Args, err, tc.wantRaw)
			}
			w := NewWriter("")
			w.Object(&r)
			if string(w.Bytes()) != tc.wantOut {
				t.Errorf("wrote %s, want %s", w.Bytes(), tc.wantOut)
			}
		})
	}
}

func TestPathError(t *testing.T) {
	cause := errors.New("bad")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{At("a", cause), "a: bad"},
		{At("a", At("b", cause)), "a.b: bad"},
		{At("a", AtIndex(1, At("b", cause))), "a[1].b: bad"},
		{AtIndex(0, AtIndex(2, cause)), "[0][2]: bad"},
	} {
		if tc.err.Error() != tc.want || !errors.Is(tc.err, cause) {
			t.Errorf("%q (wrapping the cause: %v), want %q", tc.err, errors.Is(tc.err, cause), tc.want)
		}
	}
}

// given holds members that, once present, must say something.
type given struct {
	S string
	N int
}

func (g *given) AppendMembers(ms []Member) []Member {
	return append(ms, String("s", &g.S).NotNull(), Int("n", &g.N).NotNull())
}

func TestNotNull(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    given
		wantErr string
	}{
		{in: `{}`},
		{in: `{"s":"x","n":2}`, want: given{"x", 2}},
		{in: `{"s":null}`, wantErr: "s: wrong JSON type: want a string, got null"},
		{in: `{"n":null}`, wantErr: "n: wrong JSON type: want an integer, got null"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			v, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var got given
			err = Read(v, &got)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrType) {
					t.Fatalf("error %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

package plainjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// encodingJSON is what encoding/json writes for v with the given indent
// and HTML escaping off, without the trailing newline.
func encodingJSON(t testing.TB, v any, indent string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

type sample struct {
	Name  string            `json:"name"`
	Tags  []string          `json:"tags"`
	None  []string          `json:"none"`
	Empty []int             `json:"empty"`
	Nums  []int             `json:"nums"`
	Env   map[string]string `json:"env"`
	Inner []inner           `json:"inner"`
	On    bool              `json:"on"`
	Nil   map[string]string `json:"nil"`
}

type inner struct {
	N    int            `json:"n"`
	Kids map[string]int `json:"kids"`
}

func writeSample(w *Writer, s sample) {
	w.BeginObject()
	w.Key("name")
	w.String(s.Name)
	w.Key("tags")
	w.Strings(s.Tags)
	w.Key("none")
	w.Strings(s.None)
	w.Key("empty")
	w.Ints(s.Empty)
	w.Key("nums")
	w.Ints(s.Nums)
	w.Key("env")
	w.StringMap(s.Env)
	w.Key("inner")
	w.BeginArray()
	for _, in := range s.Inner {
		w.BeginObject()
		w.Key("n")
		w.Int(in.N)
		w.Key("kids")
		w.BeginObject()
		for _, k := range SortedKeys(in.Kids) {
			w.Key(k)
			w.Int(in.Kids[k])
		}
		w.EndObject()
		w.EndObject()
	}
	w.EndArray()
	w.Key("on")
	w.Bool(s.On)
	w.Key("nil")
	w.StringMap(s.Nil)
	w.EndObject()
}

func TestWriterMatchesEncodingJSON(t *testing.T) {
	s := sample{
		Name:  "gpu <0> & \"quoted\"",
		Tags:  []string{"a", "b\n"},
		Empty: []int{},
		Nums:  []int{-1, 0, 1 << 40},
		Env:   map[string]string{"Z": "1", "A": "", "M": "\u2028"},
		Inner: []inner{{N: 1, Kids: map[string]int{}}, {N: 2, Kids: map[string]int{"b": 2, "a": 1}}},
		On:    true,
	}
	for _, indent := range []string{"", "  ", "\t"} {
		w := NewWriter(indent)
		writeSample(w, s)
		if got, want := string(w.Bytes()), encodingJSON(t, s, indent); got != want {
			t.Errorf("indent %q:\n got %s\nwant %s", indent, got, want)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "plain", `"\`, "\x00\x01\x1f\x7f", "\b\f\n\r\t", "é∑😀", "\u2028\u2029",
		"\xff", "a\xc3", "\xed\xa0\x80", "<>&", "\u00a0",
	} {
		if got, want := string(AppendString(nil, s)), encodingJSON(t, s, ""); got != want {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("x\"\\\n\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(AppendString(nil, s)), encodingJSON(t, s, ""); got != want {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}

// every has a member of each kind, with and without omitempty.
type every struct {
	S     string            `json:"s"`
	SO    string            `json:"so,omitempty"`
	N     int               `json:"n"`
	NO    int               `json:"no,omitempty"`
	B     bool              `json:"b"`
	BO    bool              `json:"bo,omitempty"`
	P     *int              `json:"p"`
	PO    *int              `json:"po,omitempty"`
	SS    []string          `json:"ss"`
	SSO   []string          `json:"sso,omitempty"`
	NS    []int             `json:"ns"`
	NSO   []int             `json:"nso,omitempty"`
	M     map[string]string `json:"m"`
	MO    map[string]string `json:"mo,omitempty"`
	T     time.Time         `json:"t"`
	Inner item              `json:"inner"`
	List  []item            `json:"list"`
	ListO []item            `json:"listO,omitempty"`
}

func (e *every) AppendMembers(ms []Member) []Member {
	return append(ms,
		String("s", &e.S), String("so", &e.SO).OmitEmpty(), Int("n", &e.N), Int("no", &e.NO).OmitEmpty(),
		Bool("b", &e.B), Bool("bo", &e.BO).OmitEmpty(), IntPtr("p", &e.P), IntPtr("po", &e.PO).OmitEmpty(),
		Strings("ss", &e.SS), Strings("sso", &e.SSO).OmitEmpty(), Ints("ns", &e.NS), Ints("nso", &e.NSO).OmitEmpty(),
		StringMap("m", &e.M), StringMap("mo", &e.MO).OmitEmpty(), Time("t", &e.T),
		Object("inner", &e.Inner), Objects("list", &e.List), Objects("listO", &e.ListO).OmitEmpty(),
	)
}

// TestObjectMatchesEncodingJSON holds Writer.Object to what encoding/json
// writes for the same json tags, and Read to reading it back.
func TestObjectMatchesEncodingJSON(t *testing.T) {
	n := 3
	at := time.Date(2026, 11, 23, 10, 0, 0, 5, time.FixedZone("x", 3600))
	for name, e := range map[string]every{
		"zero": {},
		"empty lists and maps": {SS: []string{}, SSO: []string{}, NS: []int{}, NSO: []int{}, M: map[string]string{},
			MO: map[string]string{}, List: []item{}, ListO: []item{}},
		"filled": {S: "a\"<", SO: "b", N: -1, NO: 2, B: true, BO: true, P: &n, PO: &n, SS: []string{"x"}, SSO: []string{"y"},
			NS: []int{1}, NSO: []int{2}, M: map[string]string{"b": "1", "a": "2"}, MO: map[string]string{"k": "v"}, T: at,
			Inner: item{4}, List: []item{{5}, {6}}, ListO: []item{{7}}},
	} {
		t.Run(name, func(t *testing.T) {
			w := NewWriter("  ")
			w.Object(&e)
			if got, want := string(w.Bytes()), encodingJSON(t, &e, "  "); got != want {
				t.Fatalf("Object:\n%s\nencoding/json:\n%s", got, want)
			}
			var want every
			if err := json.Unmarshal(w.Bytes(), &want); err != nil {
				t.Fatal(err)
			}
			v, err := Parse(w.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			var got every
			if err := Read(v, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Read gave %+v\nencoding/json %+v", got, want)
			}
		})
	}
}

package plainjson

import (
	"bytes"
	"encoding/json"
	"testing"
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

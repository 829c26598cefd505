package jsonwrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// encodingJSON is what encoding/json writes of v with HTML escaping off,
// indented with indent, or compact for "".
func encodingJSON(t testing.TB, v any, indent string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if indent == "" {
		return strings.TrimSuffix(buf.String(), "\n")
	}
	return buf.String()
}

type inner struct {
	A string `json:"a,omitempty"`
}

type kinds struct {
	S      string            `json:"s"`
	N      int               `json:"n,omitempty"`
	N64    int64             `json:"n64"`
	B      bool              `json:"b,omitempty"`
	P      *int              `json:"p,omitempty"`
	NilP   *int              `json:"nilP"`
	L      []string          `json:"l"`
	E      []int             `json:"e,omitempty"`
	M      map[string]string `json:"m"`
	Objs   map[string]*inner `json:"objs"`
	O      inner             `json:"o,omitempty"`
	Os     []inner           `json:"os"`
	T      time.Time         `json:"t"`
	Raw    json.RawMessage   `json:"raw,omitempty"`
	Any    any               `json:"any"`
	Dash   string            `json:"-"`
	NoTag  string
	hidden string
}

func TestMarshalMatchesEncodingJSON(t *testing.T) {
	seven := 7
	for _, tt := range []struct {
		name string
		v    any
	}{
		{"zero", kinds{}},
		{"pointer to zero", &kinds{}},
		{"values", kinds{S: "s", N: -3, N64: 1 << 40, B: true, P: &seven, L: []string{}, E: []int{1, 2}, M: map[string]string{"z": "1", "a": "2"},
			Objs: map[string]*inner{"b": {"x"}, "a": nil}, O: inner{"y"}, Os: []inner{{}, {"z"}},
			T: time.Date(2026, 11, 23, 10, 4, 5, 600, time.FixedZone("x", 3600)), Raw: json.RawMessage(` { "k" : [ 1 , 2 ] } `),
			Any: map[string]any{"n": 1, "l": []string{"a"}}, Dash: "d", NoTag: "f", hidden: "h"}},
		{"nil", nil},
		{"a string", "<&>"},
		{"a map of any", map[string]any{"cdiVersion": "0.1.0", "gpu": 2, "list": []inner{{"a"}}}},
		{"empty containers", map[string]any{"m": map[string]string{}, "l": []int{}, "o": inner{}, "deep": []any{[]any{}, map[string]any{"x": []any{}}}}},
		{"raw at depth", []any{map[string]any{"raw": json.RawMessage(`{"a":[1,{"b":[]}],"c":{}}`)}}},
	} {
		for _, indent := range []string{"", "  "} {
			t.Run(tt.name+"/indent "+strings.Repeat("_", len(indent)), func(t *testing.T) {
				got, err := marshal(tt.v, indent)
				if err != nil {
					t.Fatal(err)
				}
				if want := encodingJSON(t, tt.v, indent); string(got) != want {
					t.Errorf("jsonwrite:\n%s\nencoding/json:\n%s", got, want)
				}
			})
		}
	}
}

func marshal(v any, indent string) ([]byte, error) {
	if indent == "" {
		return Marshal(v)
	}
	return MarshalIndent(v, indent)
}

func TestMarshalRefusesWhatItCannotWrite(t *testing.T) {
	type embedded struct{ inner }
	for name, v := range map[string]any{
		"float":          1.5,
		"bytes":          []byte("x"),
		"int keys":       map[int]string{1: "a"},
		"embedded field": embedded{},
		"channel":        make(chan int),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Marshal(v); !errors.Is(err, ErrUnsupported) {
				t.Errorf("Marshal = %v, want ErrUnsupported", err)
			}
		})
	}
}

// FuzzAppendString holds AppendString to encoding/json's escaping, HTML
// escaping off, for any string, valid UTF-8 or not.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/\b\f\n\r\t\x00\x1f\x7f", "<&>", "\u2028\u2029\u00e9\U0001f600", "\xff\xfe", "a\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(AppendString(nil, s)), encodingJSON(t, s, ""); got != want {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

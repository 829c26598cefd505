package plainjson

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzParse holds Parse and Value to gjson, which the plugins read their
// documents with before: the same documents valid (but for plainjson's
// bound on nesting), and the same members, elements, names and strings
// in them. `go test -fuzz=FuzzParse ./spec/plainjson` explores further.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,-2.5e+3,true,false,null,"x\"y\\u00e9\ud83d\ude00\ud800z"],"b":{}}`, ` [ ] `, `"\u0041"`, `0`, `-0.0E-0`,
		`{"a":1,"a":2}`, `{"k":"\/\b\f\n\r\t"}`, `01`, `1.`, `.5`, `-`, `1e`, `+1`, `"\x"`, "\"\x01\"", `{"a" 1}`, `{,}`, `[1,]`,
		`{"a":1}}`, `tru`, `nulll`, `"\u12"`, `"\ud800\u0041"`, "\"\xff\xfe\"", strings.Repeat("[", 64) + strings.Repeat("]", 64),
		strings.Repeat("[", 65) + strings.Repeat("]", 65), "", " ", "\t{\n}\r",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if _, deep := err.(tooDeep); deep {
			if nesting(data) <= MaxDepth {
				t.Fatalf("refused as nested too deep, but nests %d deep: %q", nesting(data), data)
			}
			return
		}
		if valid := gjson.ValidBytes(data); (err == nil) != valid {
			t.Fatalf("Parse: %v; gjson.Valid: %v; for %q", err, valid, data)
		}
		if err != nil {
			return
		}
		if got, want := dump(v), dumpGJSON(gjson.ParseBytes(data)); got != want {
			t.Fatalf("read %s\ngjson %s\nfrom %q", got, want, data)
		}
	})
}

// nesting is how deeply arrays and objects nest in a valid document.
func nesting(data []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// dump and dumpGJSON write what a reader sees of a value, the same way.
func dump(v Value) string {
	var b strings.Builder
	switch v.Kind {
	case KindObject:
		b.WriteString("{")
		v.Members(func(name string, val Value) bool {
			b.WriteString(strconv.Quote(name) + ":" + dump(val) + ",")
			return true
		})
		b.WriteString("}")
	case KindArray:
		b.WriteString("[")
		v.Elements(func(val Value) bool {
			b.WriteString(dump(val) + ",")
			return true
		})
		b.WriteString("]")
	case KindString:
		b.WriteString("s" + strconv.Quote(v.String()))
	default:
		b.WriteString(v.Raw)
	}
	return b.String()
}

func dumpGJSON(v gjson.Result) string {
	var b strings.Builder
	switch {
	case v.IsObject():
		b.WriteString("{")
		v.ForEach(func(k, val gjson.Result) bool {
			b.WriteString(strconv.Quote(k.String()) + ":" + dumpGJSON(val) + ",")
			return true
		})
		b.WriteString("}")
	case v.IsArray():
		b.WriteString("[")
		v.ForEach(func(_, val gjson.Result) bool {
			b.WriteString(dumpGJSON(val) + ",")
			return true
		})
		b.WriteString("]")
	case v.Type == gjson.String:
		b.WriteString("s" + strconv.Quote(v.String()))
	default:
		b.WriteString(strings.TrimSpace(v.Raw))
	}
	return b.String()
}

func TestPeekString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"cdiVersion":"0.0.1","name":"x"}`, "0.0.1"},
		{`{"name":"x","cdiVersion":"0.0.1"`, "0.0.1"},
		{`{"cdiVersion":"0.0.1","type":`, "0.0.1"},
		{`{"args":{"a":[1,,"]"]},"cdiVersion":"0.0\u002e2"}`, "0.0.2"},
		{`{"cdiVersion":1}`, ""},
		{`{"cdiVersion":"0.0.1`, ""},
		{`{"a":"x","b":`, ""},
		{`["cdiVersion","0.0.1"]`, ""},
		{`{"inner":{"cdiVersion":"0.0.1"}}`, ""},
		{``, ""},
	} {
		if got := PeekString([]byte(tc.in), "cdiVersion"); got != tc.want {
			t.Errorf("PeekString(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzPeekString holds PeekString to gjson's lookup of the same name, which
// the plugins used before, on every valid document.
func FuzzPeekString(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"cdiVersion":"x"}],"cdiVersion":"0.1.0","cdiVersion":"y"}`))
	f.Add([]byte(`{"cdi\u0056ersion":"0.0.1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := Parse(data); err != nil {
			return
		}
		want := ""
		if v := gjson.GetBytes(data, "cdiVersion"); v.Type == gjson.String {
			want = v.String()
		}
		if got := PeekString(data, "cdiVersion"); got != want {
			t.Fatalf("PeekString %q, gjson %q, for %s", got, want, data)
		}
	})
}

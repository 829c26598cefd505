package conformance

import (
	"strings"
	"testing"
)

func TestOneDocument(t *testing.T) {
	tests := []struct {
		stdout string
		ok     bool   // a document, or nothing
		want   string // in the error
	}{
		{`{"cdiVersion":"0.1.0"}`, true, ""},
		{"\n  {\"a\": 1}\n\n", true, ""},
		{"", true, ""},
		{" \n", true, ""},
		{`{"a":1}{"b":2}`, false, "more than one JSON document"},
		{"{\"a\":1}\n[]", false, "more than one JSON document"},
		{`{"a":1} trailing`, false, "after its JSON document"},
		{`{"a":1}]`, false, "after its JSON document"},
		{"log line\n{\"a\":1}", false, "not a JSON object"},
		{`[{"a":1}]`, false, "not a JSON object"},
		{`null`, false, "null"},
		{`{"a":`, false, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.stdout, func(t *testing.T) {
			_, err := oneDocument([]byte(tt.stdout))
			if (err == nil) != tt.ok || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("oneDocument(%q) = %v, want ok %v or an error with %q", tt.stdout, err, tt.ok, tt.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"{\n  \"code\": 5\n}\n", "`{ \"code\": 5 }`"},
		{"a\x00b", `"a\x00b"`},
		{strings.Repeat("x", 200), "`" + strings.Repeat("x", 160) + "...`"},
	}
	for _, tt := range tests {
		if got := quote([]byte(tt.in)); got != tt.want {
			t.Errorf("quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

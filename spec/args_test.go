package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCheckArgs(t *testing.T) {
	known := []string{"root", "stateDir", "capacity", "cdiKind", "num_system_reserved"}
	tests := []struct {
		name    string
		args    string // "" leaves args out
		details string // "" means no error
	}{
		{"absent", "", ""},
		{"null", `null`, ""},
		{"empty", `{}`, ""},
		{"all known", `{"root":"/","stateDir":"/s","capacity":2,"cdiKind":"a.b/c","num_system_reserved":3}`, ""},
		{"misspelt by a dropped letter", `{"rot":"/x"}`,
			`args: unknown argument(s) "rot" (did you mean "root"?); known: capacity, cdiKind, num_system_reserved, root, stateDir`},
		{"misspelt long key", `{"num_system_reservd":20}`, `"num_system_reservd" (did you mean "num_system_reserved"?)`},
		{"swapped letters", `{"stateDri":"/s"}`, `"stateDri" (did you mean "stateDir"?)`},
		{"case", `{"Root":"/"}`, `"Root" (did you mean "root"?)`},
		{"two edits", `{"capacty2":1}`, `"capacty2" (did you mean "capacity"?)`},
		{"too far for a suggestion", `{"groups":[]}`, `unknown argument(s) "groups"; known:`},
		{"short key suggests nothing", `{"x":1}`, `unknown argument(s) "x"; known:`},
		{"every unknown key, once, in order", `{"b":1,"root":"/","a":2,"b":3}`, `unknown argument(s) "b", "a"; known:`},
		{"control characters quoted", `{"ro\not":1}`, `"ro\not"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseArgsConfig(t, tt.args)
			err := CheckArgs(cfg, known)
			if tt.details == "" {
				if err != nil {
					t.Fatalf("CheckArgs: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeUnknownArg || e.Msg != "Unknown argument" {
				t.Fatalf("CheckArgs: %v, want code 15", err)
			}
			if !strings.Contains(e.Details, tt.details) {
				t.Fatalf("details %q lack %q", e.Details, tt.details)
			}
		})
	}
}

func TestCheckArgsNoneKnown(t *testing.T) {
	err := CheckArgs(parseArgsConfig(t, `{"root":"/"}`), nil)
	if CodeOf(err) != CodeUnknownArg || !strings.HasSuffix(err.Error(), "known: none") {
		t.Fatalf("CheckArgs: %v, want code 15 that knows none", err)
	}
}

// TestCheckArgsBounded: a drop-in of very many, very long unknown keys
// gets details of a few hundred bytes, at once.
func TestCheckArgsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 20000 {
		fmt.Fprintf(&b, "%q:0,", fmt.Sprintf("k%d%s", i, strings.Repeat("y", 20)))
	}
	fmt.Fprintf(&b, "%q:0}", strings.Repeat("r", 200000))
	err := CheckArgs(parseArgsConfig(t, b.String()), []string{"root"})
	if CodeOf(err) != CodeUnknownArg || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "and 19991 more") {
		t.Fatalf("CheckArgs: %.300s (%d bytes), want code 15 naming ten keys and how many more", err, len(err.Error()))
	}
}

func parseArgsConfig(t *testing.T, args string) *Config {
	t.Helper()
	doc := `{"cdiVersion":"0.1.0","name":"n","type":"tty","plugin":"p"`
	if args != "" {
		doc += `,"args":` + args
	}
	cfg, err := ParseConfig([]byte(doc + "}"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"root", "root", 0},
		{"rot", "root", 1},
		{"roots", "root", 1},
		{"raot", "root", 1},
		{"stateDri", "stateDir", 1},
		{"cpaacity", "capacity", 1},
		{"capacty2", "capacity", 2},
		{"ab", "cd", 2},
		{"größe", "grösse", 2},
		{"root", "stateDir", 3}, // capped at the limit
		{"", "root", 3},
	}
	for _, tt := range tests {
		if got := distance(tt.a, tt.b, 3); got != tt.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := distance(tt.b, tt.a, 3); got != tt.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}

package spec

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string // substring; "" means success
	}{
		{"draft drm", `{"cdiVersion":"0.0.1","name":"DRM","type":"gpu","plugin":"drm","args":{"want_device_nodes":["primary"]}}`, ""},
		{"no args", `{"cdiVersion":"0.0.1","name":"TTYs","type":"tty","plugin":"generic-tty"}`, ""},
		{"null args", `{"cdiVersion":"0.0.1","name":"n","type":"tty","plugin":"p","args":null}`, ""},
		{"unknown field kept out", `{"cdiVersion":"0.0.1","name":"n","type":"tty","plugin":"p","future":1}`, ""},
		{"empty", ``, "not a JSON object"},
		{"array", `[1]`, "not a JSON object"},
		{"truncated", `{"cdiVersion":"0.0.1"`, "not valid JSON"},
		{"trailing", `{"cdiVersion":"0.0.1","name":"n","type":"tty","plugin":"p"} {}`, "data after"},
		{"missing all", `{}`, "cdiVersion, name, type, plugin"},
		{"bad type", `{"cdiVersion":"0.0.1","name":"n","type":"9tty","plugin":"p"}`, "resource-type"},
		{"plugin path", `{"cdiVersion":"0.0.1","name":"n","type":"tty","plugin":"../bin/p"}`, "file name"},
		{"args not object", `{"cdiVersion":"0.0.1","name":"n","type":"tty","plugin":"p","args":[1]}`, "args must be"},
		{"wrong field type", `{"cdiVersion":1,"name":"n","type":"tty","plugin":"p"}`, "field cdiVersion: wrong JSON type"},
		{"too large", `{"name":"` + strings.Repeat("x", MaxConfigSize) + `"}`, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseConfig: %v", err)
				}
				if string(c.Bytes) != tt.in {
					t.Fatalf("Bytes = %q, want the input unchanged", c.Bytes)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseConfig error = %v, want ErrMalformed mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestPeekVersion(t *testing.T) {
	for in, want := range map[string]string{
		`{"cdiVersion":"0.0.2"}`: "0.0.2",
		`{"cdiVersion":2}`:       "",
		`not json`:               "",
		`{"cdiVersion":"0.0.1",`: "0.0.1",
	} {
		if got := PeekVersion([]byte(in)); got != want {
			t.Errorf("PeekVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseConfig checks that ParseConfig never panics, that every
// rejection wraps ErrMalformed, and that what it accepts satisfies the rules.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"cdiVersion":"0.0.1","name":"TTYs","type":"tty","plugin":"generic-tty","args":{"num_system_reserved":12}}`,
		`{"cdiVersion":"0.1.0","name":"n","type":"gpu","plugin":"drm","args":null}`,
		`{}`, `[]`, `{"type":"x-y"}`, `{"args":"s"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if c.CDIVersion == "" || c.Name == "" || c.Plugin == "" || CheckResourceType(c.Type) != nil {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
		if strings.Contains(c.Plugin, "/") {
			t.Fatalf("accepted plugin path %q", c.Plugin)
		}
	})
}

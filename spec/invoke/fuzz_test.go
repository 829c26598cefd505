package invoke_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/spec/invoke"
)

// FuzzLoadConf feeds the drop-in loader arbitrary files, as an operator's
// typo or a hostile writer of /etc/cdi would. It must never panic; a
// drop-in it accepts has the folder's type and a plugin name that is not
// a path, and is handed on byte for byte. (Its cdiVersion is the plugin's
// to check, code 2.) The seeds run with every go
// test; `go test -fuzz=FuzzLoadConf ./spec/invoke` explores further.
func FuzzLoadConf(f *testing.F) {
	for _, seed := range []string{
		conf("tty", "a"),
		`{"cdiVersion":"0.1.0","name":"a","type":"tty","plugin":"generic-tty","args":{"root":"/","x":[1,{"y":null}]}}`,
		`{"cdiVersion":"0.1.0","name":"a","type":"gpu","plugin":"drm"}`,
		`{"cdiVersion":"0.1.0","name":"a","type":"tty","plugin":"../bin/sh"}`,
		`{"cdiVersion":"9.9.9","name":"a","type":"tty","plugin":"p"} trailing`,
		`{"name":"` + strings.Repeat("x", 300) + `"}`,
		strings.Repeat("{", 70),
		"",
		"\x00",
	} {
		f.Add([]byte(seed))
	}
	dir := filepath.Join(f.TempDir(), "tty.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.conf")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := invoke.LoadConf(path, "tty")
		if err != nil {
			return
		}
		if c.Type != "tty" || !bytes.Equal(c.Bytes, data) || c.Plugin == "" || strings.ContainsAny(c.Plugin, "/\x00") {
			t.Fatalf("accepted %q as type %q plugin %q", data, c.Type, c.Plugin)
		}
	})
}

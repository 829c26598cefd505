package exectest

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildIsShipped builds the drm plugin as the tests build the
// binaries they exec (Build) and as `make build` builds what `make
// install` ships, and checks that `go version -m` would print the same
// for both: the same module, dependencies and build settings, among them
// -trimpath and CGO_ENABLED=0 and no GOEXPERIMENT. The build information
// leaves out -ldflags under -trimpath, so the stripping is read from the
// binaries themselves.
func TestBuildIsShipped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin twice")
	}
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("make is needed here: %v", err)
		}
		t.Skipf("make is needed here: %v", err)
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tested, err := Build("github.com/cdiexec/cdi/plugins/drm", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shipped := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "build", "BIN="+shipped, "BINARIES=./plugins/drm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	want := versionM(t, filepath.Join(shipped, "drm"))
	if got := versionM(t, tested); got != want {
		t.Errorf("the plugin the tests exec was built otherwise than the one make build ships:\ntested:\n%s\nshipped:\n%s", got, want)
	}
	for _, setting := range []string{"\nbuild\t-trimpath=true\n", "\nbuild\tCGO_ENABLED=0\n"} {
		if !strings.Contains(want, setting) {
			t.Errorf("make build's plugin lacks %q:\n%s", strings.TrimSpace(setting), want)
		}
	}
	if strings.Contains(want, "GOEXPERIMENT") {
		t.Errorf("make build's plugin is built with a toolchain experiment:\n%s", want)
	}
}

// versionM is what `go version -m` prints of the binary at path, after
// its own path, and fails the test unless the binary is stripped of its
// symbol table.
func versionM(t *testing.T, path string) string {
	t.Helper()
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Section(".symtab") != nil {
		t.Errorf("%s has a symbol table: it was not built with -ldflags=-s", path)
	}
	return bi.String()
}

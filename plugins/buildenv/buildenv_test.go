package buildenv

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestMakefileAgrees checks that `make build` builds the plugins as Env
// says, so that the bench measures the binaries `make install` ships.
func TestMakefileAgrees(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PLUGIN_GOEXPERIMENT\s*:?=\s*(\S+)$`).FindSubmatch(data)
	if m == nil || string(m[1]) != GOEXPERIMENT {
		t.Errorf("the Makefile's PLUGIN_GOEXPERIMENT is %q, want %q", m, GOEXPERIMENT)
	}
	build := regexp.MustCompile(`(?m)^\tCGO_ENABLED=0 GOEXPERIMENT=\$\(PLUGIN_GOEXPERIMENT\) \$\(GO\) build .*\./plugins/`)
	if !build.Match(data) {
		t.Error("the Makefile's build target does not build the plugins with CGO_ENABLED=0 GOEXPERIMENT=$(PLUGIN_GOEXPERIMENT)")
	}
}

package invoke_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec/invoke"
)

// pluginDir holds the test plugin, built once for the whole package.
var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "invoke-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "testplugin"), "./testdata/testplugin")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test plugin: %v\n%s", err, out)
		return 1
	}
	pluginDir = dir
	return m.Run()
}

// testConf is a drop-in for the test plugin in the given mode.
func testConf(mode string) []byte {
	return []byte(fmt.Sprintf(`{"cdiVersion":"0.1.0","name":"test","type":"tty","plugin":"testplugin","args":{"mode":%q}}`, mode))
}

// newPlugin returns a Plugin that runs the real test plugin in mode.
func newPlugin(mode string) *invoke.Plugin {
	return &invoke.Plugin{Path: filepath.Join(pluginDir, "testplugin"), Config: testConf(mode), Timeout: 10 * time.Second}
}

package invoke_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec/invoke"
)

// pluginDir holds the test plugin, built once for the whole package.
var pluginDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &pluginDir, "./testdata/testplugin")
}

// testConf is a drop-in for the test plugin in the given mode.
func testConf(mode string) []byte {
	return []byte(fmt.Sprintf(`{"cdiVersion":"0.1.0","name":"test","type":"tty","plugin":"testplugin","args":{"mode":%q}}`, mode))
}

// newPlugin returns a Plugin that runs the real test plugin in mode.
func newPlugin(mode string) *invoke.Plugin {
	return &invoke.Plugin{Path: filepath.Join(pluginDir, "testplugin"), Config: testConf(mode), Timeout: 10 * time.Second}
}

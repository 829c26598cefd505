package conformance_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec/conformance"
)

// TestShellPlugin runs every rule against testdata/shell/shell-serial, a
// plugin in POSIX sh with jq and flock(1), written from SPEC.md alone,
// with its drop-in on a host of four serial ports, one of which is a FIFO
// that it skips, so that the rules on skipped_devices judge it: every
// rule must pass, none skip. It needs sh, jq and flock; without them it
// skips, unless CI is set.
func TestShellPlugin(t *testing.T) {
	for _, tool := range []string{"sh", "jq", "flock"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (CI is set; .ci/run installs it)", tool)
			}
			t.Skipf("%s is not installed (make prereqs says what to install)", tool)
		}
	}
	root, err := exectest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "testdata", "shell")
	data, err := os.ReadFile(filepath.Join(dir, "serial.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["args"].(map[string]any)["root"] = fifoPortRoot(t)
	rep, err := conformance.Run(context.Background(), conformance.Options{Plugin: filepath.Join(dir, "shell-serial"), DropIn: exectest.Marshal(t, doc)})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Results {
		if res.Status != conformance.Pass {
			t.Errorf("rule %s: %s %s", res.Rule, res.Status, res.Detail)
		}
	}
	if len(rep.Results) != len(conformance.Rules()) || !rep.ScratchState {
		t.Errorf("%d results of %d rules, scratch state %v:\n%s", len(rep.Results), len(conformance.Rules()), rep.ScratchState, table(rep))
	}
}

// fifoPortRoot is a host whose /dev/ttyS0 to ttyS2 are serial ports (an
// empty file stands for a device node under a root other than "/") and
// whose ttyS3 is a FIFO, a device shell-serial skips.
func fifoPortRoot(t *testing.T) string {
	root := t.TempDir()
	dev := filepath.Join(root, "dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"ttyS0", "ttyS1", "ttyS2"} {
		if err := os.WriteFile(filepath.Join(dev, port), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dev, "ttyS3"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

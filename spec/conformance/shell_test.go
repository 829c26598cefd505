package conformance_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec/conformance"
)

// TestShellPlugin runs every rule against testdata/shell/shell-serial, a
// plugin in POSIX sh with jq and flock(1), written from SPEC.md alone, on
// the fixture host's serial ports: every rule must pass, none skip. It
// needs sh, jq and flock; without them it skips, unless CI is set.
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
	doc["args"].(map[string]any)["root"] = exectest.FixtureRoot(t)
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

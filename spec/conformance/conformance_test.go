package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec/conformance"
)

// binDir holds the project's plugins and the broken test plugin, built
// once for the whole package.
var binDir string

// defects are the ways the broken test plugin can be built to misbehave.
var defects = []string{"none", "two-documents", "stdout-noise", "del-unknown-fails", "errors-exit-zero", "versions-newest-first", "no-lock", "args-ignored", "skipped-malformed", "skipped-unversioned"}

func TestMain(m *testing.M) {
	exectest.MainWith(m, func(dir string) error {
		binDir = dir
		return buildAll(dir)
	})
}

// buildAll builds the plugins, and the broken plugin once per defect
// under the name that selects it.
func buildAll(dir string) error {
	for _, p := range []string{"drm", "generic", "generic-tty", "endpoint"} {
		if _, err := exectest.Build("github.com/cdiexec/cdi/plugins/"+p, dir); err != nil {
			return err
		}
	}
	broken, err := exectest.Build("./testdata/brokenplugin", dir)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(broken)
	if err != nil {
		return err
	}
	for _, d := range defects {
		if err := os.WriteFile(filepath.Join(dir, "broken-"+d), data, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// shippedDropIn is a drop-in of conf.d with its root at the fixture host;
// its stateDir does not matter, as Run replaces it.
func shippedDropIn(t *testing.T, rel string) []byte {
	t.Helper()
	return exectest.Marshal(t, exectest.ShippedDropIn(t, rel, t.TempDir()))
}

func run(t *testing.T, plugin string, dropIn []byte) *conformance.Report {
	t.Helper()
	rep, err := conformance.Run(context.Background(), conformance.Options{Plugin: filepath.Join(binDir, plugin), DropIn: dropIn})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func table(rep *conformance.Report) string {
	var b bytes.Buffer
	rep.WriteTable(&b)
	return b.String()
}

// TestShippedPlugins runs every rule against each plugin of the project
// with its shipped drop-in, on the fixture host.
func TestShippedPlugins(t *testing.T) {
	tests := []struct{ plugin, dropIn string }{
		{"generic-tty", "tty.d/generic.conf"},
		{"drm", "gpu.d/drm.conf"},
		{"generic", "dev.d/generic.conf"},
		{"endpoint", "camera.d/endpoint.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.plugin, func(t *testing.T) {
			rep := run(t, tt.plugin, shippedDropIn(t, tt.dropIn))
			passed := 0
			for _, res := range rep.Results {
				if res.Status == conformance.Pass {
					passed++
				}
			}
			if rep.Failed() || passed < len(conformance.Rules())-1 || !rep.ScratchState {
				t.Fatalf("want every rule but code-9-type to pass, in scratch state:\n%s", table(rep))
			}
		})
	}
}

// TestSkippingPlugin runs every rule against the generic plugin on a root
// of devices it must skip, so that the rules on skipped_devices judge a
// real count: well-formed in 0.2.0, absent from the results of older
// versions.
func TestSkippingPlugin(t *testing.T) {
	args := map[string]any{"root": exectest.SkippingRoot(t, 1), "stateDir": t.TempDir(),
		"groups": []any{map[string]any{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}}
	rep := run(t, "generic", exectest.Conf(t, "0.1.0", "dev", "generic", args))
	for _, rule := range []string{"version-negotiation", "info-result"} {
		if res := find(rep, rule); res.Status != conformance.Pass {
			t.Errorf("rule %s: %s %s", rule, res.Status, res.Detail)
		}
	}
	if rep.Failed() || !rep.ScratchState {
		t.Fatalf("want no failure, in scratch state:\n%s", table(rep))
	}
}

// TestBrokenPlugins checks that each defect fails the rule it breaks,
// with a detail that says what was seen.
func TestBrokenPlugins(t *testing.T) {
	tests := []struct{ defect, rule, detail string }{
		{"two-documents", "stdout-one-document", "more than one JSON document"},
		{"stdout-noise", "stdout-one-document", "not a JSON object"},
		{"del-unknown-fails", "del-never-fails", "got exit status 1"},
		{"errors-exit-zero", "code-6-missing", "error code 6 with exit status 0, want 1"},
		{"versions-newest-first", "version", "not oldest first"},
		{"no-lock", "concurrent-add", "handed out twice"},
		{"args-ignored", "code-15-args", "want error code 15, got"},
		{"skipped-malformed", "info-result", `skipped_devices: "Not A Reason": 1 is not a positive count`},
		{"skipped-unversioned", "version-negotiation", "skipped_devices in a 0.1.0 result; it exists from 0.2.0"},
	}
	dropIn := shippedDropIn(t, "tty.d/generic.conf")
	for _, tt := range tests {
		t.Run(tt.defect, func(t *testing.T) {
			rep := run(t, "broken-"+tt.defect, dropIn)
			out := table(rep)
			res := find(rep, tt.rule)
			if !rep.Failed() || res.Status != conformance.Fail || !strings.Contains(res.Detail, tt.detail) {
				t.Fatalf("want rule %s to fail with %q:\n%s", tt.rule, tt.detail, out)
			}
			if !strings.Contains(out, "FAIL    "+tt.rule+" ") {
				t.Fatalf("the table has no FAIL row for %s:\n%s", tt.rule, out)
			}
		})
	}
}

func find(rep *conformance.Report, rule string) conformance.Result {
	for _, res := range rep.Results {
		if res.Rule == rule {
			return res
		}
	}
	return conformance.Result{}
}

// TestSharedState runs the rules with a drop-in that has no stateDir, in
// a state where another caller holds an allocation: every rule passes,
// that allocation survives, and the rules leave nothing of their own.
func TestSharedState(t *testing.T) {
	state := filepath.Join(binDir, "state-none") // the broken plugin's "none" uses it
	conf := map[string]any{"root": exectest.FixtureRoot(t), "stateDir": state}
	before := exectest.Run(t, filepath.Join(binDir, "generic-tty"),
		exectest.Env("CDI_COMMAND", "ADD", "CDI_VERSION", "0.1.0", "CDI_REQUEST", "tty:2", "CDI_REQUEST_ID", "someone-else"),
		exectest.Conf(t, "0.1.0", "tty", "generic-tty", conf))
	if before.Status != 0 {
		t.Fatalf("ADD for another caller: %s", before.Stdout)
	}
	dropIn := exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{"root": exectest.FixtureRoot(t)})
	rep := run(t, "broken-none", dropIn)
	if rep.Failed() || rep.ScratchState {
		t.Fatalf("want no failure, in the plugin's own state:\n%s", table(rep))
	}
	list := exectest.Run(t, filepath.Join(binDir, "generic-tty"), exectest.Env("CDI_COMMAND", "LIST", "CDI_VERSION", "0.1.0"),
		exectest.Conf(t, "0.1.0", "tty", "generic-tty", conf))
	var got struct{ Allocations []struct{ RequestID string } }
	list.Decode(t, &got)
	if len(got.Allocations) != 1 || got.Allocations[0].RequestID != "someone-else" {
		t.Fatalf("after the rules the state holds %s, want someone-else's allocation alone", list.Stdout)
	}
}

func TestRunRefusesInvalidDropIn(t *testing.T) {
	for _, dropIn := range []string{"", "{", `{"cdiVersion":"0.1.0","name":"x","type":"tty"}`, `{"cdiVersion":"0.1.0","name":"x","type":"tty","plugin":"p","args":[]}`} {
		_, err := conformance.Run(context.Background(), conformance.Options{Plugin: filepath.Join(binDir, "generic-tty"), DropIn: []byte(dropIn)})
		if !errors.Is(err, conformance.ErrDropIn) {
			t.Errorf("Run with drop-in %q: %v, want ErrDropIn", dropIn, err)
		}
	}
}

package doctest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// The CDI draft's two configurations, as the draft prints them but for the
// drm whitelist, which names the fixture's Intel GPU (the draft's first ADD
// example gets its nodes) in place of the draft's invented vendors.
const (
	draftDRMConf = `{"cdiVersion": "0.0.1", "name": "DRM GPUs from vendor International Amazing Graphics Inc.",
		"type": "gpu", "plugin": "drm",
		"args": {"want_device_nodes": ["primary", "render"], "vendorid_whitelist": ["0x8086"]}}`
	draftTTYConf = `{"cdiVersion": "0.0.1", "name": "TTYs", "type": "tty", "plugin": "generic-tty",
		"args": {"num_system_reserved": 12}}`
)

// draftExample is one example of the CDI draft (version 0.0.2) with the
// code and the exit status it shows, and its output where this project's
// plugins print exactly the draft's.
type draftExample struct {
	name   string
	plugin string // drm or generic-tty, each with its draft configuration
	env    []string
	status int
	code   int    // 0: success
	want   string // the draft's document; "" when the draft shows no output; "-" not compared
}

// draftExamples lists every example of the draft in the draft's order,
// which the state carries through: the ADD of 1234 is what DEL releases.
func draftExamples() []draftExample {
	return []draftExample{
		{"errors 1: unknown CDI_VERSION", "drm", []string{"CDI_VERSION", "0.999"}, 1, 1,
			`{"cdiVersion": "0.0.1", "code": 1, "msg": "Incompatible CDI version", "details": "Unsupported version: 0.999"}`},
		{"errors 2: unknown CDI_COMMAND", "drm", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "MYCMD"}, 1, 3,
			`{"cdiVersion": "0.0.1", "code": 3, "msg": "Command unsupported", "details": "Unsupported command: MYCMD"}`},
		// SPEC.md: the reply names the newest version, now 0.2.0.
		{"VERSION 1", "drm", []string{"CDI_COMMAND", "VERSION"}, 0, 0, "-"},
		// spec/DRAFT.md, item 10: the draft's drm INFO describes another plugin.
		{"INFO 1: GPUs", "drm", []string{"CDI_COMMAND", "INFO"}, 0, 0, "-"},
		{"INFO 2: TTYs", "generic-tty", []string{"CDI_COMMAND", "INFO"}, 0, 0, `{"cdiVersion": "0.0.1", "tty": 32}`},
		{"ADD 1: one GPU", "drm", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1", "CDI_REQUEST_ID", "1234"}, 0, 0,
			`{"cdiVersion": "0.0.1", "devices": ["/dev/dri/card0", "/dev/dri/renderD128"]}`},
		{"ADD 2: three TTYs", "generic-tty", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "tty:3", "CDI_REQUEST_ID", "7890"}, 0, 0,
			`{"cdiVersion": "0.0.1", "devices": ["/dev/tty13", "/dev/tty14", "/dev/tty15"]}`},
		{"ADD 3: unknown sub-resource", "drm", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", "gpu:1,gpu-memory:2048Mi", "CDI_REQUEST_ID", "3456"}, 1, 4,
			`{"cdiVersion": "0.0.1", "code": 4, "msg": "resource-spec unsupported", "details": "Unsupported resource-spec: gpu-memory"}`},
		{"DEL 1: a known request-id", "drm", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "1234"}, 0, 0, ""},
		{"DEL 2: an unknown request-id", "drm", []string{"CDI_VERSION", "0.0.1", "CDI_COMMAND", "DEL", "CDI_REQUEST_ID", "3456"}, 0, 5,
			`{"cdiVersion": "0.0.1", "code": 5, "msg": "Unknown request ID"}`},
	}
}

func TestDraftExamples(t *testing.T) {
	fixture := exectest.FixtureRoot(t)
	dir := t.TempDir()
	state := t.TempDir()
	bins := map[string]string{}
	confs := localConfs(t, map[string]string{"drm": draftDRMConf, "generic-tty": draftTTYConf}, fixture, state)
	for _, ex := range draftExamples() {
		t.Run(ex.name, func(t *testing.T) {
			if bins[ex.plugin] == "" {
				bin, err := exectest.Build("github.com/cdiexec/cdi/plugins/"+ex.plugin, dir)
				if err != nil {
					t.Fatal(err)
				}
				bins[ex.plugin] = bin
			}
			r := exectest.Run(t, bins[ex.plugin], exectest.Env(ex.env...), confs[ex.plugin])
			if r.Status != ex.status || r.Code() != ex.code {
				t.Fatalf("status %d, code %d; want %d, %d\nstdout: %s\nstderr: %s", r.Status, r.Code(), ex.status, ex.code, r.Stdout, r.Stderr)
			}
			if !sameDraftDoc(t, ex.want, r.Stdout) {
				t.Fatalf("stdout\n%s\nwant the draft's\n%s", r.Stdout, ex.want)
			}
		})
	}
}

// TestDraftMalformedAmount keeps the other half of the draft's rule that
// an amount MUST be an integer: for a resource-spec the configuration
// serves, a malformed amount is code 7.
func TestDraftMalformedAmount(t *testing.T) {
	bin, err := exectest.Build("github.com/cdiexec/cdi/plugins/drm", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conf := localConfs(t, map[string]string{"drm": draftDRMConf}, exectest.FixtureRoot(t), t.TempDir())["drm"]
	for request, code := range map[string]int{"gpu:2048Mi": 7, "gpu:0": 7, "gpu-memory:2048Mi": 4, "gpu:1,gpu:2": 7, "gpu:1,gpu-memory:0": 4} {
		t.Run(request, func(t *testing.T) {
			env := exectest.Env("CDI_VERSION", "0.0.1", "CDI_COMMAND", "ADD", "CDI_REQUEST", request, "CDI_REQUEST_ID", "3456")
			if r := exectest.Run(t, bin, env, conf); r.Status != 1 || r.Code() != code {
				t.Fatalf("status %d, code %d; want 1, %d\nstdout: %s", r.Status, r.Code(), code, r.Stdout)
			}
		})
	}
}

func sameDraftDoc(t *testing.T, want string, got []byte) bool {
	switch want {
	case "-":
		return true
	case "":
		return len(got) == 0
	}
	var w, h any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the draft's document %q is not JSON: %v", strings.TrimSpace(want), err)
	}
	return json.Unmarshal(got, &h) == nil && reflect.DeepEqual(w, h)
}

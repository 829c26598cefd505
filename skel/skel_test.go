package skel

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/spec"
)

const ttyConf = `{"cdiVersion":"0.0.1","name":"TTYs","type":"tty","plugin":"generic-tty"}`

type run struct {
	status int
	stdout string
	doc    map[string]any
}

func dispatch(t *testing.T, p Plugin, env map[string]string, stdin string) run {
	t.Helper()
	var out, errOut bytes.Buffer
	d := Dispatcher{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Stdin:     strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
	}
	r := run{status: d.Run(p), stdout: out.String()}
	if out.Len() > 0 {
		dec := json.NewDecoder(&out)
		if err := dec.Decode(&r.doc); err != nil || dec.More() {
			t.Fatalf("stdout is not exactly one JSON document: %q (%v)", r.stdout, err)
		}
	}
	return r
}

// withArgs is ttyConf with the args given.
func withArgs(args string) string {
	return strings.TrimSuffix(ttyConf, "}") + `,"args":` + args + "}"
}

func fullPlugin() Plugin {
	return Plugin{
		Types: []string{"tty"},
		Args:  []string{"stateDir", "root"},
		Info: func(a *Args) (*spec.InfoResult, error) {
			return &spec.InfoResult{Counts: map[string]int{"tty": 32}}, nil
		},
		Add: func(a *Args) (*spec.AddResult, error) {
			return &spec.AddResult{Devices: []string{"/dev/tty13"}, CDIDevices: []string{"x.y/tty=tty13"}}, nil
		},
		Del: func(a *Args) error {
			if a.RequestID == "unknown" {
				return spec.NewError(spec.CodeUnknownRequestID, "")
			}
			return nil
		},
		List: func(a *Args) (*spec.ListResult, error) { return &spec.ListResult{}, nil },
		GC:   func(a *Args) (*spec.GCResult, error) { return &spec.GCResult{Released: a.ValidRequestIDs}, nil },
	}
}

func TestDispatch(t *testing.T) {
	tests := []struct {
		name     string
		plugin   Plugin
		env      map[string]string
		stdin    string
		status   int
		code     float64 // 0: success expected
		contains string  // in stdout
	}{
		{"version needs nothing", Plugin{}, map[string]string{"CDI_COMMAND": "version"}, "", 0, 0, `"supportedVersions"`},
		{"version names the build", Plugin{}, map[string]string{"CDI_COMMAND": "VERSION"}, "", 0, 0, `"pluginVersion": "devel"`},
		{"bad version before command", fullPlugin(), map[string]string{"CDI_VERSION": "0.999"}, ttyConf, 1, 1, `"cdiVersion": "0.0.1"`},
		{"unknown command", fullPlugin(), map[string]string{"CDI_VERSION": "0.0.1", "CDI_COMMAND": "MYCMD"}, ttyConf, 1, 3, "Unsupported command: MYCMD"},
		{"dotless i is not i", fullPlugin(), map[string]string{"CDI_VERSION": "0.0.1", "CDI_COMMAND": "ınfo"}, ttyConf, 1, 3, "Unsupported command"},
		{"long s is not s", fullPlugin(), map[string]string{"CDI_VERSION": "0.1.0", "CDI_COMMAND": "LIſT"}, ttyConf, 1, 3, "Unsupported command"},
		{"nil callback", Plugin{}, map[string]string{"CDI_VERSION": "0.0.1", "CDI_COMMAND": "INFO"}, ttyConf, 1, 3, "Unsupported command"},
		{"no command", fullPlugin(), map[string]string{}, ttyConf, 1, 6, "CDI_COMMAND, CDI_VERSION"},
		{"all missing at once", fullPlugin(), map[string]string{"CDI_COMMAND": "add"}, ttyConf, 1, 6, "CDI_VERSION, CDI_REQUEST, CDI_REQUEST_ID"},
		{"empty counts as missing", fullPlugin(), map[string]string{"CDI_COMMAND": "add", "CDI_VERSION": "0.0.1", "CDI_REQUEST": "", "CDI_REQUEST_ID": "1"}, ttyConf, 1, 6, "CDI_REQUEST"},
		{"info without version", fullPlugin(), map[string]string{"CDI_COMMAND": "Info"}, ttyConf, 0, 0, `"tty": 32`},
		{"bad config", fullPlugin(), map[string]string{"CDI_COMMAND": "INFO", "CDI_VERSION": "0.0.1"}, `{`, 1, 8, "not valid JSON"},
		{"config version", fullPlugin(), map[string]string{"CDI_COMMAND": "INFO", "CDI_VERSION": "0.0.1"}, strings.Replace(ttyConf, "0.0.1", "0.9.0", 1), 1, 2, "0.9.0"},
		{"type mismatch", fullPlugin(), map[string]string{"CDI_COMMAND": "INFO", "CDI_VERSION": "0.0.1"}, strings.Replace(ttyConf, `"tty"`, `"gpu"`, 1), 1, 9, "gpu"},
		{"unknown arg", fullPlugin(), map[string]string{"CDI_COMMAND": "INFO"}, withArgs(`{"root":"/","rot":"/x"}`), 1, 15, `unknown argument(s) \"rot\" (did you mean \"root\"?); known: root, stateDir`},
		{"unknown arg, DEL exits 0", fullPlugin(), map[string]string{"CDI_COMMAND": "DEL", "CDI_VERSION": "0.0.1", "CDI_REQUEST_ID": "1"}, withArgs(`{"x":1}`), 0, 15, `\"x\"`},
		{"args of a plugin that takes none", Plugin{Info: fullPlugin().Info}, map[string]string{"CDI_COMMAND": "INFO"}, withArgs(`{"root":"/"}`), 1, 15, "known: none"},
		{"type before args", fullPlugin(), map[string]string{"CDI_COMMAND": "INFO"}, strings.Replace(withArgs(`{"rot":1}`), `"tty"`, `"gpu"`, 1), 1, 9, "gpu"},
		{"args before a newer command", fullPlugin(), map[string]string{"CDI_COMMAND": "LIST", "CDI_VERSION": "0.0.2"}, withArgs(`{"rot":1}`), 1, 15, "rot"},
		{"args before parameters", fullPlugin(), map[string]string{"CDI_COMMAND": "ADD", "CDI_VERSION": "0.0.1", "CDI_REQUEST": "tty:0", "CDI_REQUEST_ID": "-x"}, withArgs(`{"rot":1}`), 1, 15, "rot"},
		{"list needs 0.1.0", fullPlugin(), map[string]string{"CDI_COMMAND": "LIST", "CDI_VERSION": "0.0.2"}, ttyConf, 1, 3, "0.1.0"},
		{"malformed all at once", fullPlugin(), map[string]string{"CDI_COMMAND": "ADD", "CDI_VERSION": "0.0.1", "CDI_REQUEST": "tty:0", "CDI_REQUEST_ID": "-x", "CDI_REQUEST_NUMA_LOCALITY": "a"}, ttyConf, 1, 7, "CDI_REQUEST_NUMA_LOCALITY"},
		{"devices need 0.1.0", fullPlugin(), map[string]string{"CDI_COMMAND": "ADD", "CDI_VERSION": "0.0.2", "CDI_REQUEST": "tty:1", "CDI_REQUEST_ID": "1", "CDI_REQUEST_DEVICES": "tty13"}, ttyConf, 1, 7, "CDI_REQUEST_DEVICES"},
		{"add downgraded", fullPlugin(), map[string]string{"CDI_COMMAND": "ADD", "CDI_VERSION": "0.0.1", "CDI_REQUEST": "tty:1", "CDI_REQUEST_ID": "1"}, ttyConf, 0, 0, `"devices"`},
		{"del prints nothing", fullPlugin(), map[string]string{"CDI_COMMAND": "DEL", "CDI_VERSION": "0.0.1", "CDI_REQUEST_ID": "1"}, ttyConf, 0, 0, ""},
		{"del error exits 0", fullPlugin(), map[string]string{"CDI_COMMAND": "DEL", "CDI_VERSION": "0.0.1", "CDI_REQUEST_ID": "unknown"}, ttyConf, 0, 5, "Unknown request ID"},
		{"del missing exits 0", fullPlugin(), map[string]string{"CDI_COMMAND": "DEL", "CDI_VERSION": "0.0.1"}, ttyConf, 0, 6, "CDI_REQUEST_ID"},
		{"gc empty set is set", fullPlugin(), map[string]string{"CDI_COMMAND": "GC", "CDI_VERSION": "0.1.0", "CDI_VALID_REQUEST_IDS": ""}, ttyConf, 0, 0, `"released": []`},
		{"gc unset is missing", fullPlugin(), map[string]string{"CDI_COMMAND": "GC", "CDI_VERSION": "0.1.0"}, ttyConf, 1, 6, "CDI_VALID_REQUEST_IDS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dispatch(t, tt.plugin, tt.env, tt.stdin)
			if r.status != tt.status {
				t.Errorf("exit status %d, want %d; stdout %s", r.status, tt.status, r.stdout)
			}
			if code, _ := r.doc["code"].(float64); code != tt.code {
				t.Errorf("code %v, want %v; stdout %s", code, tt.code, r.stdout)
			}
			if tt.contains == "" && r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if !strings.Contains(r.stdout, tt.contains) {
				t.Errorf("stdout %s does not contain %q", r.stdout, tt.contains)
			}
		})
	}
}

// TestUnservedBeforeAmounts checks the order of CDI_REQUEST's checks:
// a resource-spec the configuration does not serve is code 4 even when an
// amount is malformed, as in the CDI draft's third ADD example; a
// malformed amount of a served one is code 7.
func TestUnservedBeforeAmounts(t *testing.T) {
	gpu := func(*Args) ([]spec.ResourceSpec, error) { return []spec.ResourceSpec{{Type: "gpu"}}, nil }
	failing := func(*Args) ([]spec.ResourceSpec, error) { return nil, errors.New("sysfs unreadable") }
	panicking := func(*Args) ([]spec.ResourceSpec, error) { panic("boom") }
	gpuConf := strings.Replace(ttyConf, `"tty"`, `"gpu"`, 1)
	tests := []struct {
		name    string
		serves  func(*Args) ([]spec.ResourceSpec, error)
		request string
		id      string
		code    float64
		details string
	}{
		{"the draft's example", gpu, "gpu:1,gpu-memory:2048Mi", "3456", 4, "Unsupported resource-spec: gpu-memory"},
		{"first unserved in request order", gpu, "gpu-b:x,gpu:1,gpu-a:1", "3456", 4, "Unsupported resource-spec: gpu-b"},
		{"unserved before a malformed id", gpu, "gpu-memory:1", "-x", 4, "Unsupported resource-spec: gpu-memory"},
		{"served with a malformed amount", gpu, "gpu:2048Mi", "3456", 7, "2048Mi"},
		{"served twice", gpu, "gpu:1,gpu:2", "3456", 7, "more than once"},
		{"malformed resource-spec", gpu, "gpu-memory_x:1", "3456", 7, "gpu-memory_x"},
		{"no Serves", nil, "gpu:1,gpu-memory:2048Mi", "3456", 7, "2048Mi"},
		{"Serves fails", failing, "gpu:1,gpu-memory:2048Mi", "3456", 7, "2048Mi"},
		{"Serves panics", panicking, "gpu:1,gpu-memory:2048Mi", "3456", 7, "2048Mi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fullPlugin()
			p.Types, p.Serves = []string{"gpu"}, tt.serves
			env := map[string]string{"CDI_COMMAND": "ADD", "CDI_VERSION": "0.0.1", "CDI_REQUEST": tt.request, "CDI_REQUEST_ID": tt.id}
			r := dispatch(t, p, env, gpuConf)
			details, _ := r.doc["details"].(string)
			if r.status != 1 || r.doc["code"] != tt.code || !strings.Contains(details, tt.details) {
				t.Fatalf("status %d, stdout %s; want code %v with %q", r.status, r.stdout, tt.code, tt.details)
			}
		})
	}
}

func TestAddVersioning(t *testing.T) {
	env := map[string]string{"CDI_COMMAND": "ADD", "CDI_VERSION": "0.0.1", "CDI_REQUEST": "tty:1", "CDI_REQUEST_ID": "1"}
	r := dispatch(t, fullPlugin(), env, ttyConf)
	if _, ok := r.doc["cdiDevices"]; ok || r.doc["cdiVersion"] != "0.0.1" {
		t.Fatalf("0.0.1 result carries 0.1.0 members or wrong version: %s", r.stdout)
	}
	env["CDI_VERSION"] = "0.1.0"
	r = dispatch(t, fullPlugin(), env, strings.Replace(ttyConf, "0.0.1", "0.1.0", 1))
	if _, ok := r.doc["cdiDevices"]; !ok || r.doc["cdiVersion"] != "0.1.0" {
		t.Fatalf("0.1.0 result lacks cdiDevices: %s", r.stdout)
	}
}

func TestCallbackFailures(t *testing.T) {
	env := map[string]string{"CDI_COMMAND": "INFO", "CDI_VERSION": "0.0.1"}
	tests := map[string]func(*Args) (*spec.InfoResult, error){
		"plain error": func(*Args) (*spec.InfoResult, error) { return nil, errors.New("disk on fire") },
		"nil result":  func(*Args) (*spec.InfoResult, error) { return nil, nil },
		"panic":       func(*Args) (*spec.InfoResult, error) { panic("boom") },
	}
	for name, info := range tests {
		t.Run(name, func(t *testing.T) {
			r := dispatch(t, Plugin{Info: info}, env, ttyConf)
			if r.status != 1 || r.doc["code"] != float64(spec.CodeInternal) {
				t.Fatalf("status %d, stdout %s; want code 14", r.status, r.stdout)
			}
		})
	}
}

func TestArgsParsed(t *testing.T) {
	var got *Args
	p := Plugin{Add: func(a *Args) (*spec.AddResult, error) { got = a; return &spec.AddResult{}, nil }}
	env := map[string]string{"CDI_COMMAND": "add", "CDI_VERSION": "0.1.0", "CDI_REQUEST": "tty:2", "CDI_REQUEST_ID": "r-1",
		"CDI_REQUEST_NUMA_LOCALITY": "1,0", "CDI_REQUEST_DEVICES": "tty13,tty14"}
	if r := dispatch(t, p, env, ttyConf); r.status != 0 {
		t.Fatalf("status %d: %s", r.status, r.stdout)
	}
	if got.Command != spec.CmdAdd || got.Version != "0.1.0" || got.RequestID != "r-1" || got.Request.String() != "tty:2" ||
		len(got.NUMANodes) != 2 || len(got.Devices) != 2 || got.Config.Type != "tty" {
		t.Fatalf("Args = %+v", got)
	}
}

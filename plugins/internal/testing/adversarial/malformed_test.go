package adversarial

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// binDir holds every plugin, built once.
var binDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &binDir, "github.com/cdiexec/cdi/plugins/generic-tty", "github.com/cdiexec/cdi/plugins/drm",
		"github.com/cdiexec/cdi/plugins/generic", "github.com/cdiexec/cdi/plugins/endpoint")
}

// target is one plugin with its shipped drop-in and a request it serves.
type target struct {
	plugin, dropIn, request string
	// badArg is one of the plugin's own args with a value of the wrong kind.
	badArg map[string]any
	// ownArg is one of the plugin's own args, and misspelt that name
	// with a letter dropped.
	ownArg, misspelt string
	// otherType is the code for a drop-in of another type: 9 from a
	// plugin with types of its own, 4 from one that serves whatever type
	// its drop-in names (the request's resource-spec is then not served).
	otherType spec.Code
}

var targets = []target{
	{"generic-tty", "tty.d/generic.conf", "tty:1", map[string]any{"num_system_reserved": "twelve"},
		"num_system_reserved", "num_system_reservd", spec.CodeTypeMismatch},
	{"drm", "gpu.d/drm.conf", "gpu:1", map[string]any{"want_device_nodes": 5},
		"want_device_nodes", "want_device_node", spec.CodeUnsupportedResource},
	{"generic", "dev.d/generic.conf", "dev-serial:1", map[string]any{"groups": "serial"},
		"groups", "grups", spec.CodeUnsupportedResource},
	{"endpoint", "camera.d/endpoint.conf", "camera:1", map[string]any{"endpoints": []any{map[string]any{"url": 7}}},
		"endpoints", "endpoint", spec.CodeUnsupportedResource},
}

// row is one malformed call: the environment on top of a valid ADD, the
// drop-in as changed, and the code the error must carry.
type row struct {
	name string
	env  map[string]string
	conf func(doc map[string]any) // nil: the drop-in as shipped
	raw  []byte                   // if set, stdin instead of the drop-in
	code spec.Code
}

func rows(tg target) []row {
	setArgs := func(kv map[string]any) func(map[string]any) {
		return func(doc map[string]any) {
			for k, v := range kv {
				doc["args"].(map[string]any)[k] = v
			}
		}
	}
	return []row{
		{name: "stdin empty", raw: []byte{}, code: spec.CodeInvalidConfig},
		{name: "stdin torn", raw: []byte(`{"cdiVersion":"0.1.0","type":`), code: spec.CodeInvalidConfig},
		{name: "stdin an array", raw: []byte(`[]`), code: spec.CodeInvalidConfig},
		{name: "stdin nested 1000 deep", raw: []byte(`{"args":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`), code: spec.CodeInvalidConfig},
		{name: "stdin over 1 MiB", raw: []byte(`{"name":"` + strings.Repeat("x", spec.MaxConfigSize) + `"}`), code: spec.CodeInvalidConfig},
		{name: "stdin binary", raw: []byte("\x00\xff\xfe{"), code: spec.CodeInvalidConfig},
		{name: "config version unknown", conf: func(d map[string]any) { d["cdiVersion"] = "9.9.9" }, code: spec.CodeIncompatibleConfigVersion},
		{name: "config of another type", conf: func(d map[string]any) { d["type"] = "other" }, code: tg.otherType},
		{name: "arg root relative", conf: setArgs(map[string]any{"root": "etc"}), code: spec.CodeInvalidConfig},
		{name: "arg capacity negative", conf: setArgs(map[string]any{"capacity": -1}), code: spec.CodeInvalidConfig},
		{name: "arg capacity a string", conf: setArgs(map[string]any{"capacity": "4"}), code: spec.CodeInvalidConfig},
		{name: "arg stateDir relative", conf: setArgs(map[string]any{"stateDir": "state"}), code: spec.CodeInvalidConfig},
		{name: "arg of the plugin's own, wrong kind", conf: setArgs(tg.badArg), code: spec.CodeInvalidConfig},
		{name: "arg root misspelt", conf: renameArg("root", "rot"), code: spec.CodeUnknownArg},
		{name: "arg of the plugin's own, misspelt", conf: renameArg(tg.ownArg, tg.misspelt), code: spec.CodeUnknownArg},
		{name: "arg unknown beside a malformed request", env: map[string]string{"CDI_REQUEST": "x:0"}, conf: setArgs(map[string]any{"future": true}), code: spec.CodeUnknownArg},
		{name: "CDI_VERSION unknown", env: map[string]string{"CDI_VERSION": "9.9.9"}, code: spec.CodeIncompatibleVersion},
		{name: "CDI_COMMAND unknown", env: map[string]string{"CDI_COMMAND": "FORMAT"}, code: spec.CodeUnsupportedCommand},
		{name: "CDI_COMMAND with a zero-width space", env: map[string]string{"CDI_COMMAND": "ADD\u200b"}, code: spec.CodeUnsupportedCommand},
		{name: "CDI_COMMAND with a dotless i", env: map[string]string{"CDI_COMMAND": "lıst"}, code: spec.CodeUnsupportedCommand},
		{name: "CDI_REQUEST missing", env: map[string]string{"CDI_REQUEST": ""}, code: spec.CodeMissingParameter},
		{name: "CDI_REQUEST amount zero", env: map[string]string{"CDI_REQUEST": strings.Replace(tg.request, ":1", ":0", 1)}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST amount huge", env: map[string]string{"CDI_REQUEST": strings.Replace(tg.request, ":1", ":99999999999999999999", 1)}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST without amount", env: map[string]string{"CDI_REQUEST": strings.TrimSuffix(tg.request, ":1")}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST spec twice", env: map[string]string{"CDI_REQUEST": tg.request + "," + tg.request}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST spec unknown", env: map[string]string{"CDI_REQUEST": "nosuchthing:1"}, code: spec.CodeUnsupportedResource},
		{name: "CDI_REQUEST_ID with a slash", env: map[string]string{"CDI_REQUEST_ID": "../x"}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST_ID too long", env: map[string]string{"CDI_REQUEST_ID": strings.Repeat("a", 65)}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST_ID newline", env: map[string]string{"CDI_REQUEST_ID": "a\nb"}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST_NUMA_LOCALITY not a number", env: map[string]string{"CDI_REQUEST_NUMA_LOCALITY": "0,x"}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST_DEVICES malformed", env: map[string]string{"CDI_REQUEST_DEVICES": "a b"}, code: spec.CodeInvalidParameter},
		{name: "CDI_REQUEST_DEVICES unknown", env: map[string]string{"CDI_REQUEST_DEVICES": "no-such-device"}, code: spec.CodeUnknownDevice},
	}
}

// renameArg returns a change of the drop-in that moves args.from to
// args.to.
func renameArg(from, to string) func(map[string]any) {
	return func(doc map[string]any) {
		args := doc["args"].(map[string]any)
		args[to] = args[from]
		delete(args, from)
	}
}

// TestMisspeltArgs: every plugin refuses a misspelt arg, common or its
// own, with every command, naming the key and the one it was likely
// meant for; INFO does not answer with the default in its place.
func TestMisspeltArgs(t *testing.T) {
	for _, tg := range targets {
		for _, names := range [][2]string{{"root", "rot"}, {tg.ownArg, tg.misspelt}} {
			t.Run(tg.plugin+"/"+names[1], func(t *testing.T) {
				doc := shippedDropIn(t, tg.dropIn)
				renameArg(names[0], names[1])(doc)
				hint := fmt.Sprintf("%q (did you mean %q?)", names[1], names[0])
				for _, env := range []map[string]string{
					{"CDI_COMMAND": "INFO"}, {"CDI_COMMAND": "ADD", "CDI_REQUEST": tg.request, "CDI_REQUEST_ID": "adv-1"},
					{"CDI_COMMAND": "DEL", "CDI_REQUEST_ID": "adv-1"}, {"CDI_COMMAND": "LIST"}, {"CDI_COMMAND": "GC", "CDI_VALID_REQUEST_IDS": "adv-1"},
				} {
					res := run(t, tg, env, marshal(t, doc))
					details, _ := res.Doc["details"].(string)
					if spec.Code(res.Code()) != spec.CodeUnknownArg || !strings.Contains(details, hint) || !strings.Contains(details, names[0]+", ") && !strings.HasSuffix(details, names[0]) {
						t.Errorf("%s: exit %d, stdout %s; want code 15 with %s, listing %s among the known", env["CDI_COMMAND"], res.Status, res.Stdout, hint, names[0])
					}
				}
			})
		}
	}
}

func TestMalformedInput(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.plugin, func(t *testing.T) {
			doc := shippedDropIn(t, tg.dropIn)
			for _, r := range rows(tg) {
				t.Run(r.name, func(t *testing.T) { runRow(t, tg, doc, r) })
			}
			list := run(t, tg, map[string]string{"CDI_COMMAND": "LIST"}, marshal(t, doc))
			var l spec.ListResult
			list.Decode(t, &l)
			if list.Status != 0 || len(l.Allocations) != 0 {
				t.Errorf("after the malformed calls LIST says %s, want no allocation", list.Stdout)
			}
		})
	}
}

func runRow(t *testing.T, tg target, doc map[string]any, r row) {
	stdin := r.raw
	if stdin == nil {
		d := clone(t, doc)
		if r.conf != nil {
			r.conf(d)
		}
		stdin = marshal(t, d)
	}
	env := map[string]string{"CDI_COMMAND": "ADD", "CDI_REQUEST": tg.request, "CDI_REQUEST_ID": "adv-1"}
	for k, v := range r.env {
		env[k] = v
	}
	res := run(t, tg, env, stdin)
	if res.Status == 0 || spec.Code(res.Code()) != r.code {
		t.Errorf("exit %d, stdout %s; want a non-zero exit and code %d", res.Status, res.Stdout, r.code)
	}
	if res.Doc["cdiVersion"] == nil || res.Doc["msg"] == nil {
		t.Errorf("error document %s lacks cdiVersion or msg", res.Stdout)
	}
}

// run execs the plugin as a runtime does, with CDI_VERSION 0.1.0 unless
// env says otherwise; an empty value unsets a variable.
func run(t *testing.T, tg target, env map[string]string, stdin []byte) exectest.Result {
	t.Helper()
	full := map[string]string{"CDI_VERSION": "0.1.0"}
	for k, v := range env {
		full[k] = v
		if v == "" {
			delete(full, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := exectest.RunE(ctx, filepath.Join(binDir, tg.plugin), full, stdin)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// shippedDropIn is conf.d's drop-in with root at the fixture and a fresh
// stateDir.
func shippedDropIn(t *testing.T, rel string) map[string]any {
	return exectest.ShippedDropIn(t, rel, t.TempDir())
}

func clone(t *testing.T, doc map[string]any) map[string]any {
	var out map[string]any
	if err := json.Unmarshal(marshal(t, doc), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func marshal(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wait bounds every run: a plugin that hangs on malformed input fails
// the row instead of the whole test binary.
const wait = 20 * time.Second

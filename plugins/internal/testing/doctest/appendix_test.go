package doctest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
)

func TestAppendix(t *testing.T) {
	fixture := exectest.FixtureRoot(t)
	f, err := os.Open(filepath.Join(filepath.Dir(filepath.Dir(fixture)), "SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Examples) < 10 {
		t.Fatalf("found only %d examples in the appendix", len(a.Examples))
	}
	bins := buildPlugins(t, a.Examples)
	confs := localConfs(t, a.Confs, fixture, t.TempDir())
	// The examples build on each other's state, so they run in order and
	// the first failure ends the test.
	for _, ex := range a.Examples {
		conf, ok := confs[ex.Conf]
		if !ok {
			t.Fatalf("SPEC.md:%d: no configuration %s in the appendix", ex.Line, ex.Conf)
		}
		r := exectest.Run(t, bins[ex.Plugin], ex.Env, conf)
		if r.Status != ex.Status || !sameDoc(t, ex, r.Stdout) {
			t.Fatalf("SPEC.md:%d: %s %v\ngot status %d and\n%s\nwant status %d and\n%s\nstderr: %s",
				ex.Line, ex.Plugin, ex.Env, r.Status, r.Stdout, ex.Status, ex.Want, r.Stderr)
		}
	}
}

func buildPlugins(t *testing.T, examples []Example) map[string]string {
	dir := t.TempDir()
	bins := map[string]string{}
	for _, ex := range examples {
		if _, done := bins[ex.Plugin]; done {
			continue
		}
		bin, err := exectest.Build("github.com/cdiexec/cdi/plugins/"+ex.Plugin, dir)
		if err != nil {
			t.Fatal(err)
		}
		bins[ex.Plugin] = bin
	}
	return bins
}

// localConfs points each configuration's root at the fixture and its
// state at a fresh directory, the only changes from what SPEC.md shows.
func localConfs(t *testing.T, confs map[string]string, root, state string) map[string][]byte {
	out := map[string][]byte{}
	for path, text := range confs {
		var c map[string]any
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			t.Fatalf("configuration %s in SPEC.md: %v", path, err)
		}
		args, _ := c["args"].(map[string]any)
		if args == nil {
			args = map[string]any{}
		}
		args["root"], args["stateDir"], c["args"] = root, state, args
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out[path] = b
	}
	return out
}

// sameDoc compares JSON by value. Timestamps and builds cannot match a
// document written once by hand, so a "created" or a "pluginVersion" in
// the expected document matches any string.
func sameDoc(t *testing.T, ex Example, got []byte) bool {
	if !ex.HasWant {
		return len(got) == 0
	}
	var want, have any
	if err := json.Unmarshal([]byte(ex.Want), &want); err != nil {
		t.Fatalf("SPEC.md:%d: the document shown is not JSON: %v", ex.Line, err)
	}
	if err := json.Unmarshal(got, &have); err != nil {
		return false
	}
	return reflect.DeepEqual(wildcardCreated(want, have), have)
}

func wildcardCreated(want, have any) any {
	switch w := want.(type) {
	case map[string]any:
		h, _ := have.(map[string]any)
		for k, v := range w {
			if _, isString := v.(string); (k == "created" || k == "pluginVersion") && isString {
				if hv, ok := h[k].(string); ok {
					w[k] = hv
				}
				continue
			}
			w[k] = wildcardCreated(v, h[k])
		}
	case []any:
		h, _ := have.([]any)
		for i := range w {
			if i < len(h) {
				w[i] = wildcardCreated(w[i], h[i])
			}
		}
	}
	return want
}

package stress

import (
	"reflect"
	"slices"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// TestGCReleasesExactlyTheInvalid: GC frees the allocations whose ids are
// outside the valid set and no others, and LIST keeps reporting exactly
// what ADD returned for the rest.
func TestGCReleasesExactlyTheInvalid(t *testing.T) {
	conf := conf(t, 1)
	added := map[string]spec.AddResult{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		r := exectest.Run(t, plugin, env("ADD", "CDI_REQUEST", "tty:2", "CDI_REQUEST_ID", id), conf)
		if r.Status != 0 || r.Code() != 0 {
			t.Fatalf("ADD %s: status %d, %s", id, r.Status, r.Stdout)
		}
		var res spec.AddResult
		r.Decode(t, &res)
		added[id] = res
	}
	gc := func(valid string) []string {
		t.Helper()
		// Env sets the variable even when valid is "": an empty valid set.
		r := exectest.Run(t, plugin, env("GC", "CDI_VALID_REQUEST_IDS", valid), conf)
		if r.Status != 0 || r.Code() != 0 {
			t.Fatalf("GC %q: status %d, %s", valid, r.Status, r.Stdout)
		}
		var res spec.GCResult
		r.Decode(t, &res)
		return res.Released
	}
	if got := gc("e,b"); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("GC released %v, want [a c d]", got)
	}
	want := map[string]spec.AddResult{"b": added["b"], "e": added["e"]}
	if got := results(list(t, conf, 1)); !reflect.DeepEqual(got, want) {
		t.Fatalf("LIST after GC = %+v, want %+v", got, want)
	}
	if got := gc("b,e,zz"); len(got) != 0 {
		t.Errorf("a second GC, valid set a superset of what is held, released %v", got)
	}
	if got := gc(""); !slices.Equal(got, []string{"b", "e"}) {
		t.Errorf("GC with an empty valid set released %v, want [b e]", got)
	}
	if got := list(t, conf, 1); len(got) != 0 {
		t.Errorf("LIST after releasing everything: %v", got)
	}
}

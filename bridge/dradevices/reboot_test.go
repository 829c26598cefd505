package dradevices

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// reboot makes the terminals' plugin state look written before a reboot:
// the plugin drops its allocations at its next command (SPEC.md's boot
// rule), as on a node that restarted. The CDI spec directory, a tmpfs,
// is emptied.
func (r *rig) reboot(t *testing.T) {
	t.Helper()
	path := filepath.Join(r.stateDir, "tty", "generic-tty.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["bootID"] = "an-earlier-boot"
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(r.cdiDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(r.cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// After a reboot the plugins hold none of the claims prepared before it;
// the kubelet prepares them again, and every Prepare runs its ADDs again
// (the same request-ids: ADD repeated returns the same devices), whatever
// the checkpoint says was done. The devices are then held, and a second
// caller's ADD pinned to one is refused.
func TestPrepareAfterAReboot(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]})
	before, err := r.p.Prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	r.reboot(t)
	after := r.preparer(t)
	again, err := after.Prepare(ctx, c)
	if err != nil || fmt.Sprint(again) != fmt.Sprint(before) {
		t.Fatalf("Prepare after the reboot = %+v, %v; want %+v", again, err, before)
	}
	if got := r.allocations(t); fmt.Sprint(got) != "[u1-0]" {
		t.Errorf("plugin allocations after the reboot's Prepare %v, want u1-0", got)
	}
	if _, ok := r.spec(t, "u1"); !ok {
		t.Error("the claim's spec is not written again")
	}
	id, _ := r.pool(t, "tty-generic").Devices[0].ID, 0
	req, _ := spec.ParseRequest("tty:1")
	if _, err := r.pool(t, "tty-generic").Plugin.Add(ctx, invoke.AddRequest{Request: req, RequestID: "another", Devices: []string{id}}); err == nil {
		t.Errorf("a second ADD pinned to %s, which the claim holds, succeeded", id)
	}
}

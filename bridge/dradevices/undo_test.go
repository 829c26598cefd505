package dradevices

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// failing runs the real plugin, but fails the commands set, by command
// and request-id ("ADD u1-2"), as a plugin that cannot be started would.
type failing struct {
	mu   sync.Mutex
	fail map[string]bool
}

func (f *failing) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*invoke.Output, error) {
	var cmd, id string
	for _, kv := range env {
		if v, ok := cutVar(kv, spec.EnvCommand); ok {
			cmd = v
		}
		if v, ok := cutVar(kv, spec.EnvRequestID); ok {
			id = v
		}
	}
	f.mu.Lock()
	fail := f.fail[cmd+" "+id]
	f.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("%w: %s of %s refused by the test", invoke.ErrExec, cmd, id)
	}
	return invoke.ProcessExec{}.ExecPlugin(ctx, path, stdin, env)
}

func cutVar(kv, name string) (string, bool) {
	if len(kv) > len(name) && kv[:len(name)+1] == name+"=" {
		return kv[len(name)+1:], true
	}
	return "", false
}

// failEvery makes the rig's plugins run through f.
func (r *rig) failEvery(f *failing) {
	for _, p := range r.pools {
		p.Plugin.Exec = f
	}
}

// A Prepare whose undo fails half-way keeps, in memory as on disk, the
// claim's record without the ADD results the undo took back: the
// kubelet's retry runs every ADD again and is given only CDI ids of
// request-ids the plugin holds. (The record's devices were shared with
// the checkpoint's map, and the ADDs wrote their results into it.)
func TestFailedUndoLeavesNoResults(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	f := &failing{fail: map[string]bool{"ADD u1-2": true, "DEL u1-1": true}}
	r.failEvery(f)
	c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"cdi.local", "n/tty-generic", r.devices[1]},
		result{"cdi.local", "n/tty-generic", r.devices[2]})
	if _, err := r.p.Prepare(ctx, c); err == nil {
		t.Fatal("Prepare succeeded with an ADD refused")
	}
	if got := r.allocations(t); fmt.Sprint(got) != "[u1-1]" {
		t.Fatalf("plugin allocations %v, want u1-1 (its DEL failed)", got)
	}
	mem, ok := r.p.Checkpoint.Get("u1")
	disk := r.preparer(t)
	onDisk, onDiskOK := disk.Checkpoint.Get("u1")
	if !ok || !onDiskOK {
		t.Fatalf("the claim's record: in memory %v, on disk %v; want it kept for the DEL still owed", ok, onDiskOK)
	}
	for i, d := range mem.Devices {
		if d.Result != nil || onDisk.Devices[i].Result != nil {
			t.Errorf("device %d (%s): in memory result %v, on disk %v; want none: the ADDs were undone or failed",
				i, d.RequestID, d.Result != nil, onDisk.Devices[i].Result != nil)
		}
	}

	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	devs, err := r.p.Prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	held := slices.Sorted(slices.Values(r.allocations(t)))
	for _, d := range devs {
		for _, id := range d.CDIIDs {
			if reqID := id[len("cdi.local/claim="):]; !slices.Contains(held, reqID) {
				t.Errorf("the retry names %s, which the plugin does not hold (it holds %v)", id, held)
			}
		}
	}
	if fmt.Sprint(held) != "[u1-0 u1-1 u1-2]" {
		t.Errorf("plugin allocations after the retry %v, want u1-0, u1-1, u1-2", held)
	}
}

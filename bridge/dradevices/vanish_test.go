package dradevices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// A device a prepared claim holds stays among its pool's devices when it
// vanishes, unhealthy, though it is its pool's last: the claim's
// Unprepare then DELs it, and when it comes back it is free for the next
// claim. (Discovery kept a vanished device only for the device plugins'
// holders: the pool went, Unprepare skipped the DEL and forgot the claim,
// and every ADD on the device failed once it was back.)
func TestVanishedDeviceHeldByAClaim(t *testing.T) {
	root, confDir := t.TempDir(), t.TempDir()
	tty := filepath.Join(root, "dev", "tty41")
	if err := os.MkdirAll(filepath.Dir(tty), 0o755); err != nil {
		t.Fatal(err)
	}
	plug := func() {
		if err := os.WriteFile(tty, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plug()
	writeDropIn(t, confDir, "tty.d/generic.conf", exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"root": root, "stateDir": t.TempDir(), "num_system_reserved": 40}))
	r := &rig{cdiDir: t.TempDir(), ckpt: filepath.Join(t.TempDir(), "claims.json")}
	r.p = r.preparer(t)
	disc := &discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Keep: r.p.Holds}
	discover := func() {
		t.Helper()
		pools, err := disc.Discover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r.pools = pools
		r.p.SetPools(pools)
	}
	discover()
	ctx := context.Background()
	if _, err := r.p.Prepare(ctx, claim("u1", result{"cdi.local", "n/tty-generic", "tty41"})); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tty); err != nil {
		t.Fatal(err)
	}
	discover()
	if len(r.pools) != 1 || len(r.pools[0].Devices) != 1 || r.pools[0].Devices[0].Healthy || !r.pools[0].Vanished["tty41"] {
		t.Fatalf("pools after tty41 vanished %+v, want it kept, unhealthy", r.pools)
	}
	if err := r.p.Unprepare(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := r.allocations(t); len(got) != 0 {
		t.Errorf("plugin allocations %v after the claim's Unprepare, want none", got)
	}
	plug()
	discover()
	if _, err := r.p.Prepare(ctx, claim("u2", result{"cdi.local", "n/tty-generic", "tty41"})); err != nil {
		t.Errorf("the next claim of tty41, back: %v", err)
	}
	if got := r.allocations(t); fmt.Sprint(got) != "[u2-0]" {
		t.Errorf("plugin allocations %v, want u2-0", got)
	}
}

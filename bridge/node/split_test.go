package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/discovery"
)

// A pool Split hands elsewhere is not served: no device plugin, no
// Instance in the store, not among the pools reclaim GCs.
func TestSplitPoolsAreNotServed(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []string
	split := func(u discovery.Update) discovery.Update {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range u.Pools {
			elsewhere = append(elsewhere, p.Name)
		}
		return discovery.Update{Event: u.Event}
	}
	k, n := startNodeWith(t, "tty.d/generic.conf", ttyDropIn(t), func(c *Config) { c.Split = split })
	deadline := time.Now().Add(wait)
	for err := n.Readiness(); err != nil; err = n.Readiness() {
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if len(elsewhere) == 0 || elsewhere[0] != "tty-generic" {
		t.Errorf("Split was handed %v, want tty-generic", elsewhere)
	}
	mu.Unlock()
	if r := k.Registrations(); len(r) != 0 {
		t.Errorf("registered %v, want nothing", r)
	}
	if all, err := n.cfg.Store.List(context.Background()); err != nil || len(all) != 0 {
		t.Errorf("store holds %v, %v; want no Instance", all, err)
	}
	if pools := (reclaimPlugins{n}).Pools(); len(pools) != 0 {
		t.Errorf("reclaim would GC %v", pools)
	}
}

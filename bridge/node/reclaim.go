package node

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
)

// Reclaimer returns the slot reclaim of this node: the kubelet's
// PodResources answers through lister, a slot unheld for grace is
// released. Its passes exclude this node's Allocate calls, so that a
// slot being set up is never taken for unused.
func (n *Node) Reclaimer(lister reclaim.Lister, grace time.Duration) *reclaim.Reclaimer {
	return &reclaim.Reclaimer{
		Lister: lister, Store: n.cfg.Store, Plugins: reclaimPlugins{n}, Node: n.cfg.NodeName, Domain: n.cfg.Domain,
		Tracker: reclaim.NewTracker(grace), Lock: &n.allocMu, Logger: n.cfg.Logger, OthersHeld: n.claimHeld,
	}
}

// claimHeld says whether a container holds the device of the DRA claim
// whose ADD had request-id requestID: the kubelet lists the claim's CDI
// names among the container's (the DRA front end, bridge/dradevices,
// names a claim's devices by their request-ids). A pool that moved from
// DRA to the device plugins under running pods has such allocations.
func (n *Node) claimHeld(pods *reclaim.Pods, requestID string) bool {
	return pods.CDIDevices[cdispec.ClaimDevice(n.cfg.Domain, requestID)]
}

// reclaimPlugins is the node's pools as reclaim.Plugins.
type reclaimPlugins struct{ n *Node }

var _ reclaim.Plugins = reclaimPlugins{}

// Del runs DEL on pool's plugin; a pool no longer served has nothing left
// to release.
func (r reclaimPlugins) Del(ctx context.Context, pool, requestID string) error {
	p, ok := r.n.pool(pool)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.alloc.timeout())
	defer cancel()
	return p.Plugin.Del(ctx, requestID)
}

// GC runs GC on the plugin of pools, which share one drop-in.
func (r reclaimPlugins) GC(ctx context.Context, pools []string, valid []string) error {
	if len(pools) == 0 {
		return nil
	}
	p, ok := r.n.pool(pools[0])
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.alloc.timeout())
	defer cancel()
	if _, err := p.Plugin.GC(ctx, valid); err != nil {
		return fmt.Errorf("drop-in %s: %w", p.Conf.Path, err)
	}
	return nil
}

// List runs LIST on the plugin of pools, which share one drop-in.
func (r reclaimPlugins) List(ctx context.Context, pools []string) ([]spec.Allocation, error) {
	p, ok := r.n.pool(pools[0])
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.n.alloc.timeout())
	defer cancel()
	l, err := p.Plugin.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("drop-in %s: %w", p.Conf.Path, err)
	}
	return l.Allocations, nil
}

// HeldElsewhere records the devices of pools that allocations of no slot
// of the node hold: the views offer them as unhealthy, so that the
// kubelet gives none of their slots.
func (r reclaimPlugins) HeldElsewhere(pools []string, devices map[string]bool) {
	r.n.mu.Lock()
	changed := false
	for _, pool := range pools {
		if !equalSets(r.n.heldElsewhere[pool], devices) {
			r.n.heldElsewhere[pool] = devices
			changed = true
		}
	}
	r.n.mu.Unlock()
	if changed {
		r.n.refresh(context.Background())
	}
}

// Pools groups the served pools by drop-in file.
func (r reclaimPlugins) Pools() [][]string {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	byDropIn := map[string][]string{}
	for name, p := range r.n.pools {
		byDropIn[p.Conf.Path] = append(byDropIn[p.Conf.Path], name)
	}
	var out [][]string
	for _, pools := range byDropIn {
		sort.Strings(pools)
		out = append(out, pools)
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

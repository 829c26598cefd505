package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
)

// startSlices starts the controller of the node's ResourceSlices when
// --dra-pools names any pool, else returns nil: as early as the bridge
// knows the API client, the driver and the node, so that the library's
// second-long start (bridge/dra.NodeSlices) passes while the Instance
// store syncs and the first discovery runs. It publishes nothing before
// the DRA front end's first publish. Its error is for flags that do not
// allow DRA.
func startSlices(ctx context.Context, o *options, api *kubeAccess, log *slog.Logger) (*dra.NodeSlices, error) {
	if len(drafront.ParsePools(o.draPools)) == 0 {
		return nil, nil
	}
	if !o.cdiNames {
		return nil, fmt.Errorf("%w: --dra-pools needs CDI: DRA gives containers devices by CDI names only, and --cdi-names is false", errUsage)
	}
	if api == nil {
		return nil, fmt.Errorf("%w: --dra-pools needs the Kubernetes API: --kubeconfig, or run in a pod", errUsage)
	}
	return drafront.StartSlices(ctx, o.domain, o.nodeName, api.client, log), nil
}

// startDRA starts the DRA front end over slices, the node's slice
// controller (startSlices), or returns nil when that is nil: DRA is off.
// It stops when ctx ends; onFatal is told of an error its kubelet plugin
// cannot recover from. store is the node's Instance store, cdiDir its
// CDI spec directory (the node's files and the claims' share it: a
// second Open could remove a write of the first's under way),
// podResources the kubelet's PodResources API (nil: off); m gets its
// checkpoint's fate, its claims and its devices.
func startDRA(ctx context.Context, o *options, api *kubeAccess, slices *dra.NodeSlices, store instance.Store, cdiDir *cdispec.Dir,
	podResources reclaim.Lister,
	m *metrics.Metrics, log *slog.Logger, onFatal func(error)) (*drafront.FrontEnd, error) {
	if slices == nil {
		return nil, nil
	}
	log.Info("DRA pools", "pools", o.draPools)
	front, err := drafront.Start(ctx, drafront.Config{NodeName: o.nodeName, Driver: o.domain, Client: api.client, CDI: cdiDir,
		Checkpoint: o.draCheckpoint, PluginDir: o.draPluginDir, RegistrarDir: o.draRegistrarDir, Store: store,
		Kubelet: podResources, Grace: o.reclaimGrace, SweepPeriod: o.reclaimEvery,
		OnSetAside: m.DRACheckpointSetAside, OnClaim: m.DRAClaim, Logger: log, OnFatal: onFatal, Slices: slices,
		PodUID: types.UID(o.podUID)})
	if err != nil {
		return nil, err
	}
	m.DRAPools(front.Published)
	return front, nil
}

// frontEnds hands each discovery to the front ends: the pools of
// --dra-pools (with their drop-ins' other pools, drafront.Split) to the
// DRA front end, when it runs, the others to the device plugins' node.
type frontEnds struct {
	node     *node.Node
	dra      *drafront.FrontEnd // nil: DRA off
	draPools map[string]bool
}

// publish is discovery's publish: it splits u between the front ends.
func (f frontEnds) publish(ctx context.Context) func(discovery.Update) {
	return func(u discovery.Update) {
		if f.dra == nil {
			f.node.Publish(ctx, u)
			return
		}
		devicePlugins, viaDRA := drafront.Split(u.Pools, f.draPools)
		f.dra.SetPools(viaDRA)
		f.node.Publish(ctx, discovery.Update{Pools: devicePlugins, Event: u.Event})
	}
}

// holds is discovery's Keep: a vanished device stays while a front end
// says it is held, a container's slot or a prepared claim.
func (f frontEnds) holds(pool string, dev spec.DeviceInfo) bool {
	return f.node.Holds(pool, dev) || (f.dra != nil && f.dra.Holds(pool, dev))
}

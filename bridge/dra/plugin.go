package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// plugin is Devices as the library's kubeletplugin.DRAPlugin.
type plugin struct {
	devices Devices
	log     *slog.Logger
	onFatal func(error)
	health  *healthFeed
}

var _ kubeletplugin.DRAPlugin = (*plugin)(nil)

// PrepareResourceClaims prepares each claim on its own: one that fails is
// reported in its result (the kubelet retries it) and does not fail the
// others of the pod.
func (p *plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := p.devices.Prepare(ctx, c)
		if err != nil {
			p.log.Error("preparing a claim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "error", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		res := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}
		for _, d := range devs {
			res.Devices = append(res.Devices, kubeletplugin.Device{
				Requests: d.Requests, PoolName: d.Pool, DeviceName: d.Name, CDIDeviceIDs: d.CDIIDs, ShareID: d.ShareID,
			})
		}
		p.log.Info("prepared a claim", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "devices", len(devs))
		out[c.UID] = res
	}
	return out, nil
}

// UnprepareResourceClaims unprepares each claim on its own.
func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := p.devices.Unprepare(ctx, c.UID)
		if err != nil {
			p.log.Error("unpreparing a claim", "claim", c.String(), "error", err)
		} else {
			p.log.Info("unprepared a claim", "claim", c.String())
		}
		out[c.UID] = err
	}
	return out, nil
}

// WatchHealthStatus is one of the kubelet's health streams (the library
// serves it as DRAResourceHealth v1 and v1alpha1): the complete list the
// driver last reported (Driver.ReportHealth), sent at once, whenever it
// changes, and every HealthResend, until the kubelet ends the stream.
func (p *plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return p.health.watch(ctx, reports, HealthResend)
}

// HandleError logs what the library met in the background. Publishing
// errors are all recoverable (the library retries); any other stops the
// bridge through onFatal.
func (p *plugin) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) || p.onFatal == nil {
		p.log.Error("DRA kubelet plugin: "+msg, "error", err)
		return
	}
	p.log.Error("DRA kubelet plugin failed: "+msg, "error", err)
	p.onFatal(err)
}

// publishError is the slice controller's ErrorHandler: it retries every
// error itself, so each is recoverable, as kubeletplugin's own handler
// treats them.
func (p *plugin) publishError(ctx context.Context, err error, msg string) {
	p.HandleError(ctx, fmt.Errorf("%w: %w", kubeletplugin.ErrRecoverable, err), msg)
}

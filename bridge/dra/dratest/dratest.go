package dratest

import (
	"context"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/dra"
)

// Devices is a dra.Devices that prepares a claim into one device per
// allocation result of any driver, whose CDI id is "<Vendor>/claim=<uid>",
// or fails with Err. Safe for concurrent use.
type Devices struct {
	Vendor string
	Err    error

	mu         sync.Mutex
	prepared   []types.UID
	unprepared []types.UID
}

var _ dra.Devices = (*Devices)(nil)

// Prepare records claim and answers as the type says.
func (f *Devices) Prepare(_ context.Context, claim *resourceapi.ResourceClaim) ([]dra.Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prepared = append(f.prepared, claim.UID)
	if f.Err != nil {
		return nil, f.Err
	}
	var out []dra.Device
	if claim.Status.Allocation == nil {
		return out, nil
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		out = append(out, dra.Device{Requests: []string{r.Request}, Pool: r.Pool, Name: r.Device,
			CDIIDs: []string{f.Vendor + "/claim=" + string(claim.UID)}})
	}
	return out, nil
}

// Unprepare records uid and returns Err.
func (f *Devices) Unprepare(_ context.Context, uid types.UID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unprepared = append(f.unprepared, uid)
	return f.Err
}

// Calls returns the UIDs Prepare and Unprepare were called with, in order.
func (f *Devices) Calls() (prepared, unprepared []types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]types.UID(nil), f.prepared...), append([]types.UID(nil), f.unprepared...)
}

// Publisher is a dra.Publisher that keeps what it was given.
type Publisher struct {
	mu        sync.Mutex
	published []resourceslice.DriverResources
	health    []dra.DeviceHealth // the last report; nil before one
}

var _ dra.Publisher = (*Publisher)(nil)

// PublishResources keeps resources.
func (p *Publisher) PublishResources(_ context.Context, resources resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = append(p.published, resources)
	return nil
}

// Published returns every DriverResources given, oldest first.
func (p *Publisher) Published() []resourceslice.DriverResources {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]resourceslice.DriverResources(nil), p.published...)
}

// ReportHealth keeps devices.
func (p *Publisher) ReportHealth(devices []dra.DeviceHealth) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.health = append(make([]dra.DeviceHealth, 0, len(devices)), devices...)
}

// Health returns the last health report, nil before the first.
func (p *Publisher) Health() []dra.DeviceHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health
}

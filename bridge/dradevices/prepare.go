package dradevices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// ClaimClass is the CDI class of the per-claim spec files
// (cdispec.ClaimClass).
const ClaimClass = cdispec.ClaimClass

// ErrNotReady is wrapped by the errors of a call that needs the pools
// before the first discovery handed them over: the kubelet retries.
var ErrNotReady = errors.New("devices not discovered yet")

// ErrNotAllocatable is wrapped by Prepare's error for an allocation this
// node cannot serve: another node's pool, or a device it no longer has.
var ErrNotAllocatable = errors.New("allocation not on this node's devices")

// Preparer prepares claims by running the exec plugins: dra.Devices over
// the pools that discovery hands to SetPools. Safe for concurrent use.
type Preparer struct {
	// Driver is the DRA driver's name: only allocation results of it are
	// prepared.
	Driver string
	Node   string
	// CDI is the spec directory; the claims' files are of kind
	// <Vendor>/claim.
	CDI    *cdispec.Dir
	Vendor string
	// Checkpoint records every claim before its ADDs run.
	Checkpoint *Checkpoint
	// Logger gets what cannot be returned. Each ADD and DEL is bounded
	// by the pool's Plugin.Timeout, as discovery set it.
	Logger *slog.Logger
	// Grace is how long an allocation of the device plugins in a DRA
	// drop-in (its pool moved to DRA under running pods) is kept once no
	// container holds it (Sweep).
	Grace time.Duration

	mu    sync.Mutex
	pools map[string]discovery.Pool // by the bridge's pool name; nil before SetPools
	// heldElsewhere is, by pool, the devices the device plugins'
	// allocations hold (Rebuild, Sweep): not offered in the slices.
	heldElsewhere map[string]map[string]bool
	// foreign tracks each drop-in's allocations of the device plugins,
	// by its file; claimMu's.
	foreign map[string]*reclaim.Foreign
	// claimMu makes Prepare and Unprepare one at a time, so that the
	// checkpoint's record of a claim is read and written by one call: the
	// library serializes the kubelet's calls, but that is its choice.
	claimMu sync.Mutex
}

var _ dra.Devices = (*Preparer)(nil)

// SetPools hands over the pools served through DRA.
func (p *Preparer) SetPools(pools []discovery.Pool) {
	m := make(map[string]discovery.Pool, len(pools))
	for _, pl := range pools {
		m[pl.Name] = pl
	}
	p.mu.Lock()
	p.pools = m
	p.mu.Unlock()
}

// ready is ErrNotReady before SetPools.
func (p *Preparer) ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pools == nil {
		return ErrNotReady
	}
	return nil
}

func (p *Preparer) pool(name string) (discovery.Pool, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pools == nil {
		return discovery.Pool{}, false, ErrNotReady
	}
	pl, ok := p.pools[name]
	return pl, ok, nil
}

// Prepare runs, for every device of claim allocated by this driver, ADD
// pinned to it with request-id <claim UID>-<n> (n its place among the
// claim's results of this driver), writes the claim's CDI spec with what
// the ADDs returned, and returns the devices with their CDI names. It is
// all or nothing: when an ADD fails, the claim's ADDs are deleted and the
// claim forgotten.
//
// The devices are worked out from the claim every time, and every ADD
// runs every time, for a claim prepared before too (an ADD repeated
// returns the same devices): the checkpoint is a record of what to DEL,
// not of what the plugins hold, which a reboot empties (SPEC.md's boot
// rule) while the kubelet asks for the claim again.
func (p *Preparer) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]dra.Device, error) {
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	return p.prepare(ctx, claim)
}

// prepare is Prepare, its caller holding claimMu.
func (p *Preparer) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]dra.Device, error) {
	rec, err := p.plan(claim)
	if err != nil {
		return nil, err
	}
	if old, ok := p.Checkpoint.Get(claim.UID); ok && !sameDevices(old, rec) {
		// Not this allocation's record: its ADDs go first.
		if err := p.release(ctx, claim.UID, old); err != nil {
			return nil, err
		}
	}
	// Recorded before any ADD, so that whatever happens next an
	// Unprepare knows which request-ids to DEL.
	if err := p.Checkpoint.Put(claim.UID, rec); err != nil {
		return nil, err
	}
	if err := p.addAll(ctx, &rec); err != nil {
		if uerr := p.release(ctx, claim.UID, rec); uerr != nil {
			err = errors.Join(err, fmt.Errorf("undoing the claim's ADDs: %w", uerr))
		}
		return nil, err
	}
	if err := p.Checkpoint.Put(claim.UID, rec); err != nil {
		return nil, err
	}
	s := p.claimSpec(rec)
	if len(s.Devices) > 0 {
		if err := p.CDI.WriteFile(SpecFile(claim.UID), s); err != nil {
			return nil, err
		}
	}
	return p.devices(rec, s), nil
}

// sameDevices says whether a and b are the ADDs of the same devices under
// the same request-ids.
func sameDevices(a, b Claim) bool {
	return slices.EqualFunc(a.Devices, b.Devices, func(x, y PreparedDevice) bool {
		return x.RequestID == y.RequestID && x.Pool == y.Pool && x.ID == y.ID
	})
}

// plan resolves claim's allocation results of this driver to the
// devices of this node's pools: from the node's own DRA pool, or from the
// cluster's shared one of a pool this node serves, provided the node sees
// the device.
//
// A request-id is <claim UID>-<n>, n the result's place among the claim's
// results of this driver, for a share of a shared device too: claim UIDs
// are unique in the cluster and n within the claim, so two shares of one
// device, in one claim or in two, never have the same request-id, and
// the share id, which the scheduler sets per allocation result, adds
// nothing to it.
func (p *Preparer) plan(claim *resourceapi.ResourceClaim) (Claim, error) {
	rec := Claim{Namespace: claim.Namespace, Name: claim.Name}
	if claim.Status.Allocation == nil {
		return rec, fmt.Errorf("%w: claim %s/%s is not allocated", ErrNotAllocatable, claim.Namespace, claim.Name)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.Driver {
			continue
		}
		name, shared, err := p.poolOf(r.Pool)
		if err != nil {
			return rec, err
		}
		pl, ok, err := p.pool(name)
		if err != nil {
			return rec, err
		}
		dev, found := findDevice(pl, r.Device)
		if !ok || !found || dev.Shared != shared {
			return rec, fmt.Errorf("%w: device %s of pool %s is not served", ErrNotAllocatable, r.Device, r.Pool)
		}
		d := PreparedDevice{
			Request: r.Request, Pool: name, Shared: shared, Device: r.Device, ID: dev.ID, Resource: dev.Resource,
			RequestID: fmt.Sprintf("%s-%d", claim.UID, len(rec.Devices)), ShareID: r.ShareID,
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			d.AdminAccess, d.Result = true, adminResult(dev)
		}
		rec.Devices = append(rec.Devices, d)
	}
	return rec, nil
}

// adminResult is what a container with administrative access to dev is
// given: its device nodes, as INFO lists them, without an ADD. The env,
// mounts and annotations only an ADD returns are not given (an endpoint
// camera, which has nothing else, gives nothing).
func adminResult(dev spec.DeviceInfo) *spec.AddResult {
	r := &spec.AddResult{Devices: []string{}, DeviceNodes: dev.DeviceNodes}
	for _, n := range dev.DeviceNodes {
		r.Devices = append(r.Devices, n.HostPath)
	}
	return r
}

// poolOf is the bridge's pool of DRA pool draPool: this node's
// (PoolName), or a shared one (SharedPoolName, which holds no '/').
func (p *Preparer) poolOf(draPool string) (pool string, shared bool, err error) {
	if name, ok := strings.CutPrefix(draPool, PoolName(p.Node, "")); ok {
		return name, false, nil
	}
	if !strings.Contains(draPool, "/") {
		return draPool, true, nil
	}
	return "", false, fmt.Errorf("%w: pool %s is not of node %s", ErrNotAllocatable, draPool, p.Node)
}

func findDevice(p discovery.Pool, name string) (spec.DeviceInfo, bool) {
	for _, d := range p.Devices {
		if DeviceName(d.ID) == name {
			return d, true
		}
	}
	return spec.DeviceInfo{}, false
}

// addAll runs the ADDs of rec's devices and records their results in rec;
// a device for admin access has none.
func (p *Preparer) addAll(ctx context.Context, rec *Claim) error {
	for i := range rec.Devices {
		d := &rec.Devices[i]
		if d.AdminAccess {
			continue
		}
		pl, ok, err := p.pool(d.Pool)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: pool %s is not served", ErrNotAllocatable, d.Pool)
		}
		req, err := spec.ParseRequest(d.Resource + ":1")
		if err != nil {
			return err
		}
		r, err := pl.Plugin.Add(ctx, invoke.AddRequest{Request: req, RequestID: d.RequestID, Devices: []string{d.ID}})
		if err != nil {
			return fmt.Errorf("ADD of %s (device %s of pool %s): %w", d.RequestID, d.ID, d.Pool, err)
		}
		d.Result = r
	}
	return nil
}

// claimSpec is rec as a CDI spec: one device per ADD result that edits
// the container, named by its request-id.
//
// The env of a device is that of every device of its request, joined
// (spec.JoinValues, in the claim's order): a container that names the
// request gets all of them, and the runtime applies their CDI devices one
// after the other, so that of two devices setting one variable the last
// would win, where the device plugins, and one ADD for several devices,
// give both values. Requests are not joined with each other: a container
// may name one request of a claim and not another.
func (p *Preparer) claimSpec(rec Claim) *specs.Spec {
	env := map[string]map[string]string{} // by request
	for _, d := range rec.Devices {
		if d.Result != nil {
			env[baseRequest(d.Request)] = spec.JoinValues(env[baseRequest(d.Request)], d.Result.Env)
		}
	}
	s := &specs.Spec{Kind: p.Vendor + "/" + ClaimClass}
	for _, d := range rec.Devices {
		if d.Result == nil {
			continue
		}
		r := *d.Result
		r.Env = env[baseRequest(d.Request)]
		if e := cdispec.Edits(&r); !cdispec.Empty(e) {
			s.Devices = append(s.Devices, specs.Device{Name: d.RequestID, ContainerEdits: e})
		}
	}
	return s
}

// baseRequest is the request of a request or subrequest name
// ("gpu/large" is of "gpu"), the name a container refers to.
func baseRequest(name string) string {
	base, _, _ := strings.Cut(name, "/")
	return base
}

// devices is rec as dra.Devices, each with its CDI name when s names it.
func (p *Preparer) devices(rec Claim, s *specs.Spec) []dra.Device {
	named := map[string]bool{}
	for _, d := range s.Devices {
		named[d.Name] = true
	}
	out := make([]dra.Device, 0, len(rec.Devices))
	for _, d := range rec.Devices {
		dev := dra.Device{Requests: []string{d.Request}, Pool: p.draPool(d.Pool, d.Shared), Name: d.Device, ShareID: d.ShareID}
		if named[d.RequestID] {
			dev.CDIIDs = []string{s.Kind + "=" + d.RequestID}
		}
		out = append(out, dev)
	}
	return out
}

// SpecFile is the name of claim uid's CDI spec file.
func SpecFile(uid types.UID) string { return "cdi-bridge-claim_" + string(uid) + ".json" }

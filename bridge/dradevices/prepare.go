package dradevices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
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
// before the first discovery handed them over (Prepare and Unprepare wait
// for them until their context ends): the kubelet retries.
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
	// Grace is how long what the kubelet's pods do not hold is kept in a
	// DRA drop-in (Sweep): an allocation of the device plugins (its pool
	// moved to DRA under running pods) once no container holds it, and
	// a claim's, recorded or not, once the kubelet does not name the
	// claim. It bridges a kubelet restart.
	Grace time.Duration
	// PluginDir, when set, is the DRA driver's plugin directory shared
	// with the other bridge of a rolling update (dra.Config.PodUID), which
	// writes the same checkpoint: each call reads the checkpoint anew,
	// under the library's lock of the calls, and Rebuild and Sweep take
	// that lock (dra.LockCalls).
	PluginDir string
	// OnSetAside, if set, is told of a checkpoint that, read anew
	// (PluginDir), could not be read and was moved aside; else that is
	// logged.
	OnSetAside func(SetAside)

	mu    sync.Mutex
	pools map[string]discovery.Pool // by the bridge's pool name; nil before SetPools
	// poolsSet is closed by the first SetPools (made by the first of it
	// and waitPools).
	poolsSet chan struct{}
	// heldElsewhere is, by pool, the devices the device plugins'
	// allocations hold (Rebuild, Sweep): not offered in the slices.
	// slotPools is the pools where device plugins' slots are kept.
	heldElsewhere map[string]map[string]bool
	slotPools     map[string]bool
	// slots tracks each drop-in's allocations of the device plugins, and
	// leftovers its allocations no record names, by its file; unnamed
	// is, per recorded claim, since when the kubelet has not named it
	// (collect). claimMu's.
	slots, leftovers map[string]*reclaim.Foreign
	unnamed          map[types.UID]time.Time
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
	defer p.mu.Unlock()
	if p.pools == nil {
		close(p.setSignal())
	}
	p.pools = m
}

// setSignal is poolsSet, made if need be; p.mu is held.
func (p *Preparer) setSignal() chan struct{} {
	if p.poolsSet == nil {
		p.poolsSet = make(chan struct{})
	}
	return p.poolsSet
}

// waitPools waits until the first SetPools, or ctx ends. The kubelet
// calls the driver as soon as it registers, which is before the first
// discovery: at a start, and during a rolling update, where the kubelet
// turns to the new bridge at once. A claim asked for then waits for the
// pools, a second at most as a rule, instead of failing and waiting for
// the kubelet's retry (10 s and more) with a failure event.
func (p *Preparer) waitPools(ctx context.Context) error {
	p.mu.Lock()
	set := p.setSignal()
	p.mu.Unlock()
	select {
	case <-set:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotReady, context.Cause(ctx))
	}
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
// the ADDs returned, and returns the devices with their CDI names.
//
// The devices are worked out from the claim every time, and every ADD
// runs every time, for a claim prepared before too (an ADD repeated
// returns the same devices): the checkpoint is a record of what to DEL,
// not of what the plugins hold, which a reboot empties (SPEC.md's boot
// rule) while the kubelet asks for the claim again.
//
// When an ADD fails, the error is returned and only what this call did
// is undone: the request-ids it ADDed that the claim did not hold before
// are DELed. What an earlier Prepare of the claim did stays, its record
// included: a running container may hold it, and the kubelet, which asks
// again after its own restart, never asks twice for a claim it took for
// prepared. A claim held nowhere before is forgotten (all or nothing).
func (p *Preparer) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]dra.Device, error) {
	if err := p.waitPools(ctx); err != nil {
		return nil, err
	}
	p.claimMu.Lock()
	defer p.claimMu.Unlock()
	if err := p.reload(); err != nil {
		return nil, err
	}
	return p.prepare(ctx, claim, nil)
}

// prepare is Prepare, its caller holding claimMu (and, with PluginDir,
// the library's lock of the calls, the checkpoint read anew). listed is
// the request-ids the plugins held before the call (Rebuild's LIST), held
// as the record's results are; nil where not known.
func (p *Preparer) prepare(ctx context.Context, claim *resourceapi.ResourceClaim, listed map[string]bool) ([]dra.Device, error) {
	planned, err := p.plan(claim)
	if err != nil {
		return nil, err
	}
	rec, err := p.recordFirst(ctx, claim, planned)
	if err != nil {
		return nil, err
	}
	before := rec.clone()
	held := heldBefore(rec, listed)
	if reached, err := p.addAll(ctx, &rec); err != nil {
		return nil, p.undo(ctx, claim.UID, rec, reached, held, err)
	}
	if !reflect.DeepEqual(before, rec) {
		if err := p.Checkpoint.Put(claim.UID, rec); err != nil {
			return nil, err
		}
	}
	s := p.claimSpec(rec)
	if len(s.Devices) > 0 {
		if err := p.CDI.WriteFile(SpecFile(claim.UID), s); err != nil {
			return nil, err
		}
	}
	return p.devices(rec, s), nil
}

// recordFirst is the record of claim to run planned's ADDs with: an
// earlier Prepare's record of the same allocation, with its results;
// else planned, recorded before any ADD, so that whatever happens next
// an Unprepare knows which request-ids to DEL. The records it replaces
// are released first: one of another allocation of the claim, and one
// of an earlier claim of its name, which is gone (the kubelet prepares
// a claim of a name only once the one before it is unprepared).
func (p *Preparer) recordFirst(ctx context.Context, claim *resourceapi.ResourceClaim, planned Claim) (Claim, error) {
	for _, uid := range p.Checkpoint.Named(claim.Namespace, claim.Name) {
		if uid == claim.UID {
			continue
		}
		stale, _ := p.Checkpoint.Get(uid)
		p.log().Info("releasing the prepared claim an earlier claim of the name left", "claim", claim.Namespace+"/"+claim.Name, "uid", uid)
		if err := p.unprepare(ctx, uid, stale); err != nil {
			return Claim{}, err
		}
	}
	old, had := p.Checkpoint.Get(claim.UID)
	if had && sameDevices(old, planned) {
		return old, nil
	}
	if had {
		if err := p.release(ctx, claim.UID, old); err != nil {
			return Claim{}, err
		}
	}
	return planned, p.Checkpoint.Put(claim.UID, planned)
}

// heldBefore is the request-ids of rec that an earlier call holds: those
// with a recorded result, and those listed.
func heldBefore(rec Claim, listed map[string]bool) map[string]bool {
	held := map[string]bool{}
	for _, d := range rec.Devices {
		if d.Result != nil || listed[d.RequestID] {
			held[d.RequestID] = true
		}
	}
	return held
}

// undo takes back what a Prepare of claim uid that failed with cause did:
// the ADDs it reached (reached: those that succeeded and the one that
// failed, which may have allocated all the same) of request-ids not held
// before. The record keeps the results of those held before, and is
// forgotten when it has none and every DEL succeeded. The error is cause,
// joined with the undo's.
func (p *Preparer) undo(ctx context.Context, uid types.UID, rec Claim, reached int, held map[string]bool, cause error) error {
	var undo Claim
	for i := range rec.Devices[:reached] {
		if d := &rec.Devices[i]; !held[d.RequestID] {
			undo.Devices = append(undo.Devices, *d)
			d.Result = nil
		}
	}
	var errs []error
	if err := p.delAll(ctx, uid, undo); err != nil {
		errs = append(errs, fmt.Errorf("undoing the claim's ADDs: %w", err))
	}
	switch {
	case len(held) == 0 && len(errs) == 0:
		errs = append(errs, p.Checkpoint.Delete(uid))
	default:
		errs = append(errs, p.Checkpoint.Put(uid, rec))
	}
	return errors.Join(append([]error{cause}, errs...)...)
}

// sameDevices says whether a and b are the ADDs of the same devices under
// the same request-ids.
func sameDevices(a, b Claim) bool {
	return slices.EqualFunc(a.Devices, b.Devices, func(x, y PreparedDevice) bool {
		return x.RequestID == y.RequestID && x.Pool == y.Pool && x.ID == y.ID
	})
}

// reload reads the checkpoint anew when another bridge may have written
// it (PluginDir set), under the library's lock of the calls. A file that
// cannot be read is moved aside (Checkpoint.Reload), the records in
// memory kept, and OnSetAside told.
func (p *Preparer) reload() error {
	if p.PluginDir == "" {
		return nil
	}
	aside, err := p.Checkpoint.Reload(time.Now())
	switch {
	case aside == nil:
	case p.OnSetAside != nil:
		p.OnSetAside(*aside)
	default:
		p.log().Warn("DRA checkpoint set aside; the claims this bridge knows of are written anew", "reason", aside.Reason,
			"setAside", aside.Path, "error", aside.Err)
	}
	return err
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

// addAll runs the ADDs of rec's devices, in order, and records their
// results in rec; a device for admin access has none. It stops at the
// first that fails: reached counts the devices it went through, that one
// included.
func (p *Preparer) addAll(ctx context.Context, rec *Claim) (reached int, err error) {
	for i := range rec.Devices {
		if err := p.add(ctx, &rec.Devices[i]); err != nil {
			return i + 1, err
		}
	}
	return len(rec.Devices), nil
}

// add runs d's ADD, pinned to its device, and records its result in d.
func (p *Preparer) add(ctx context.Context, d *PreparedDevice) error {
	if d.AdminAccess {
		return nil
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

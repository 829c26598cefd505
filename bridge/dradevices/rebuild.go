package dradevices

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
)

// Truth is what Rebuild is told of the world beyond the checkpoint.
type Truth struct {
	// Claims are the API server's claims: every one with an allocation
	// result of the driver, or more (the others are passed over).
	Claims []resourceapi.ResourceClaim
	// Pods is what the kubelet's containers hold; nil where the kubelet
	// cannot be asked (no PodResources socket), which frees nothing.
	Pods *reclaim.Pods
}

// ReadTruth reads the Truth: the API server's claims, the kubelet's
// containers.
type ReadTruth func(context.Context) (Truth, error)

// ErrNotRebuilt is wrapped by Rebuild's error when it did nothing: the
// Truth, the checkpoint or the lock could not be had. Rebuild is to be
// tried again.
var ErrNotRebuilt = errors.New("prepared claims not rebuilt")

// Rebuild makes the checkpoint and the plugins agree with the API server
// and the kubelet, once the pools are set and before the driver
// registers: the checkpoint is a cache, which may have been set aside
// (OpenCheckpoint), deleted, or written before a reboot that emptied the
// plugins' state.
//
//   - Every claim allocated with a device of this node's pools and
//     reserved for a pod, and every reserved claim of a shared pool that
//     this node's plugins, the checkpoint or the kubelet's containers name,
//     is prepared again (Prepare: its ADDs repeated, its record and CDI
//     spec written), so that a running pod keeps its devices and a
//     restarted container finds its spec.
//   - With the kubelet asked (else nothing is released), a recorded claim
//     the API server no longer has allocated is unprepared, and each DRA
//     drop-in's GC releases what holds none of those claims and no
//     container holds: a claim gone while the bridge was down, another
//     caller's allocation. An allocation of the device plugins (the
//     drop-in moved to DRA under running pods) is kept while a container
//     holds its pool's device-plugin resources, and for the grace after
//     (Sweep), its device left out of the slices (Withheld).
//
// A claim that cannot be prepared is in the error, and the others go on.
//
// It reads the Truth (read) under the lock of Prepare and Unprepare, and
// with PluginDir set under the library's lock of the calls, the
// checkpoint read anew (lockCalls): the other bridge of a rolling update
// serves the kubelet until this one registers, and a claim it prepares
// is in the checkpoint, and allocated in the API server, before its ADDs
// run. Read before the lock, the API server's claims could miss one that
// the other bridge prepared in between, whose record and ADDs would then
// be taken for leftovers and released.
func (p *Preparer) Rebuild(ctx context.Context, read ReadTruth) error {
	unlock, err := p.lockCalls(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotRebuilt, err)
	}
	defer unlock()
	t, err := read(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotRebuilt, err)
	}
	return p.rebuild(ctx, t)
}

// rebuild is Rebuild, its caller holding the locks.
func (p *Preparer) rebuild(ctx context.Context, t Truth) error {
	listed, err := p.listDropIns(ctx)
	if err != nil {
		return err
	}
	allocated := map[types.UID]bool{}
	for i := range t.Claims {
		if p.ofDriver(&t.Claims[i]) {
			allocated[t.Claims[i].UID] = true
		}
	}
	// The claims gone first: their devices may be a rebuilt claim's.
	var errs []error
	for _, uid := range p.Checkpoint.UIDs() {
		if allocated[uid] || t.Pods == nil {
			continue
		}
		rec, _ := p.Checkpoint.Get(uid)
		p.log().Info("releasing a prepared claim the API server no longer has allocated", "claim", rec.Namespace+"/"+rec.Name, "uid", uid)
		if err := p.release(ctx, uid, rec); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, p.CDI.RemoveFile(SpecFile(uid)))
	}
	for i := range t.Claims {
		c := &t.Claims[i]
		if !allocated[c.UID] || !p.here(c, listed, t.Pods) {
			continue
		}
		if _, err := p.prepare(ctx, c, listed); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err))
		}
	}
	if t.Pods != nil {
		own := func(id string) bool { return allocated[claimOf(id)] || p.recorded(id) || p.claimHeld(t.Pods, id) }
		errs = append(errs, p.collect(ctx, t.Pods, own, true))
	}
	return errors.Join(errs...)
}

// Sweep is Rebuild's GC as it runs every reclaim period, with the kubelet
// only: it releases the allocations of the device plugins in DRA drop-ins
// that no container has held for the grace, and tells what the others
// hold, to leave out of the slices. Nothing else is released: whether a
// claim the checkpoint does not record is still allocated only the API
// server's list of every claim says, which Rebuild reads once.
func (p *Preparer) Sweep(ctx context.Context, pods *reclaim.Pods) error {
	unlock, err := p.lockCalls(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return p.collect(ctx, pods, func(id string) bool { return !p.isSlot(id) }, false)
}

// lockCalls is the lock of Prepare and Unprepare for work outside them:
// claimMu, and with PluginDir the library's lock of the calls too
// (dra.LockCalls), after which the checkpoint is read anew, for what the
// other bridge of a rolling update wrote. unlock releases both.
func (p *Preparer) lockCalls(ctx context.Context) (unlock func(), err error) {
	unlockFile := func() {}
	if p.PluginDir != "" {
		if unlockFile, err = dra.LockCalls(ctx, p.PluginDir); err != nil {
			return nil, err
		}
	}
	p.claimMu.Lock()
	unlock = func() { p.claimMu.Unlock(); unlockFile() }
	if err := p.reload(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// ofDriver says whether c has an allocation result of this driver.
func (p *Preparer) ofDriver(c *resourceapi.ResourceClaim) bool {
	if c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == p.Driver {
			return true
		}
	}
	return false
}

// here says whether c, a claim of this driver, is to be prepared on this
// node: it is reserved for a pod, and has a device of this node's pools,
// or of a shared pool that this node's plugins (listed), checkpoint or
// containers name it for.
func (p *Preparer) here(c *resourceapi.ResourceClaim, listed map[string]bool, pods *reclaim.Pods) bool {
	if len(c.Status.ReservedFor) == 0 {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == p.Driver && strings.HasPrefix(r.Pool, PoolName(p.Node, "")) {
			return true
		}
	}
	if _, ok := p.Checkpoint.Get(c.UID); ok {
		return true
	}
	if pods != nil && pods.Claims[c.Namespace+"/"+c.Name] {
		return true
	}
	for id := range listed {
		if claimOf(id) == c.UID {
			return true
		}
	}
	return false
}

// requestIDForm is a claim's request-id, <claim UID>-<n>.
var requestIDForm = regexp.MustCompile(`^(.+)-[0-9]+$`)

// claimOf is the claim UID of a claim's request-id; "" for another.
func claimOf(requestID string) types.UID {
	m := requestIDForm.FindStringSubmatch(requestID)
	if m == nil {
		return ""
	}
	return types.UID(m[1])
}

// recorded says whether the checkpoint records requestID.
func (p *Preparer) recorded(requestID string) bool {
	rec, ok := p.Checkpoint.Get(claimOf(requestID))
	if !ok {
		return false
	}
	for _, d := range rec.Devices {
		if d.RequestID == requestID {
			return true
		}
	}
	return false
}

// claimHeld says whether a container holds the device of request-id
// requestID, by the CDI name the claim gave it.
func (p *Preparer) claimHeld(pods *reclaim.Pods, requestID string) bool {
	return pods.CDIDevices[cdispec.ClaimDevice(p.Vendor, requestID)]
}

// slotForm is the end of a device plugins' slot id, <instance>-<i>, of an
// instance named <pool>-<hash> (instance.Name): <hash>-<i>.
var slotForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9]+$`)

// slotOf is the pool and instance of a request-id that is a slot id of
// the device plugins on this node, of one of the DRA pools.
func (p *Preparer) slotOf(requestID string) (pool, inst string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.pools {
		named := instance.Name(name, "", p.Node, true)
		prefix := named[:len(named)-len("01234567")] // <pool>-
		if rest, ok := strings.CutPrefix(requestID, prefix); ok && slotForm.MatchString(rest) {
			return name, requestID[:strings.LastIndex(requestID, "-")], true
		}
	}
	return "", "", false
}

func (p *Preparer) isSlot(requestID string) bool {
	_, _, ok := p.slotOf(requestID)
	return ok
}

// slotHeld says whether a container may hold the device plugins' slot
// requestID: the kubelet lists it under its Instance-level resource, or
// lists a device of its pool's Configuration-level resource, whose
// virtual ids cannot be told apart without the Instance store.
func (p *Preparer) slotHeld(pods *reclaim.Pods, requestID string) bool {
	pool, inst, ok := p.slotOf(requestID)
	if !ok {
		return false
	}
	return pods.Devices[p.Vendor+"/"+inst][requestID] || len(pods.Devices[p.Vendor+"/"+pool]) > 0
}

// listDropIns LISTs every DRA drop-in and returns the request-ids they
// hold.
func (p *Preparer) listDropIns(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	for _, d := range p.dropIns() {
		l, err := d.plugin.Plugin.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("LIST of drop-in %s: %w", d.file, err)
		}
		for _, a := range l.Allocations {
			out[a.RequestID] = true
		}
	}
	return out, nil
}

// dropIn is a DRA drop-in: its file, its pools, and one of them for its
// plugin.
type dropIn struct {
	file   string
	pools  []string
	plugin discovery.Pool
}

// dropIns are the drop-ins of the pools set.
func (p *Preparer) dropIns() []dropIn {
	p.mu.Lock()
	defer p.mu.Unlock()
	byFile := map[string]*dropIn{}
	var out []*dropIn
	for name, pl := range p.pools {
		d, ok := byFile[pl.Conf.Path]
		if !ok {
			d = &dropIn{file: pl.Conf.Path, plugin: pl}
			byFile[pl.Conf.Path] = d
			out = append(out, d)
		}
		d.pools = append(d.pools, name)
	}
	res := make([]dropIn, 0, len(out))
	for _, d := range out {
		res = append(res, *d)
	}
	return res
}

// collect goes over each DRA drop-in's allocations: those own says are
// the front end's stay; the device plugins' slots a container may hold
// are kept (reclaim.Foreign), their devices told as held elsewhere, and
// released once none has for the grace; with gc, every other allocation
// is released too, by GC with what stays as the valid set, else the
// device plugins' slots alone, by DEL. A drop-in that cannot LIST keeps
// what it held.
func (p *Preparer) collect(ctx context.Context, pods *reclaim.Pods, own func(string) bool, gc bool) error {
	var errs []error
	p.mu.Lock()
	elsewhere := maps.Clone(p.heldElsewhere)
	p.mu.Unlock()
	if elsewhere == nil {
		elsewhere = map[string]map[string]bool{}
	}
	for _, d := range p.dropIns() {
		l, err := d.plugin.Plugin.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("LIST of drop-in %s: %w", d.file, err))
			continue
		}
		var others []spec.Allocation
		for _, a := range l.Allocations {
			if !own(a.RequestID) && !p.isSlot(a.RequestID) {
				others = append(others, a)
			}
		}
		keep, release := p.foreignOf(d.file).Sort(time.Now(), l.Allocations, func(id string) bool { return own(id) || !p.isSlot(id) },
			func(id string) bool { return p.slotHeld(pods, id) })
		if gc {
			errs = append(errs, p.gc(ctx, d, l.Allocations, append(release, others...)))
		} else {
			errs = append(errs, p.delSlots(ctx, d, release))
		}
		for _, name := range d.pools {
			elsewhere[name] = reclaim.Devices(keep)
		}
	}
	p.mu.Lock()
	p.heldElsewhere = elsewhere
	p.mu.Unlock()
	return errors.Join(errs...)
}

// gc runs GC on drop-in d with every allocation but release valid.
func (p *Preparer) gc(ctx context.Context, d dropIn, allocs, release []spec.Allocation) error {
	gone := map[string]bool{}
	for _, a := range release {
		gone[a.RequestID] = true
	}
	valid := []string{}
	for _, a := range allocs {
		if !gone[a.RequestID] {
			valid = append(valid, a.RequestID)
		}
	}
	r, err := d.plugin.Plugin.GC(ctx, valid)
	if err != nil {
		return fmt.Errorf("GC of drop-in %s: %w", d.file, err)
	}
	if len(r.Released) > 0 {
		p.log().Info("released allocations of no claim that no container holds", "dropIn", d.file, "requestIds", r.Released)
	}
	return nil
}

// delSlots DELs the device plugins' slots of release in drop-in d.
func (p *Preparer) delSlots(ctx context.Context, d dropIn, release []spec.Allocation) error {
	var errs []error
	for _, a := range release {
		if err := d.plugin.Plugin.Del(ctx, a.RequestID); err != nil && spec.CodeOf(err) != spec.CodeUnknownRequestID {
			errs = append(errs, fmt.Errorf("DEL of %s in drop-in %s: %w", a.RequestID, d.file, err))
			continue
		}
		p.log().Info("released a device plugins' slot of a DRA pool that no container holds", "dropIn", d.file, "requestId", a.RequestID)
	}
	return errors.Join(errs...)
}

// foreignOf is the reclaim.Foreign of drop-in file.
func (p *Preparer) foreignOf(file string) *reclaim.Foreign {
	if p.foreign == nil {
		p.foreign = map[string]*reclaim.Foreign{}
	}
	f, ok := p.foreign[file]
	if !ok {
		f = &reclaim.Foreign{Grace: p.Grace}
		p.foreign[file] = f
	}
	return f
}

// Withheld is, by pool, the devices the device plugins' allocations hold
// (Rebuild, Sweep): the slices leave them out until they are released
// (Resources).
func (p *Preparer) Withheld() map[string]map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]map[string]bool, len(p.heldElsewhere))
	for pool, held := range p.heldElsewhere {
		out[pool] = maps.Clone(held)
	}
	return out
}

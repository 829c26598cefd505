package dradevices

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/reclaim"
)

// Truth is what Rebuild is told of the world beyond the checkpoint.
type Truth struct {
	// Pods is what the kubelet's containers hold and the pods it runs;
	// nil where the kubelet cannot be asked (no PodResources socket),
	// which frees nothing.
	Pods *reclaim.Pods
	// Claims are the API server's claims Rebuild asked for, by
	// <namespace>/<name>: those of the pods the kubelet runs (their
	// specs name them) and those the checkpoint records. One the API
	// server does not have is absent.
	Claims map[string]*resourceapi.ResourceClaim
	// InUse is the claims in use here (ClaimsInUse).
	InUse map[types.UID]bool
}

// ClaimsInUse says which claims are in use on this node, by the API server:
// allocated, and reserved for a pod the kubelet runs that is bound to
// this node, not done, and names the claim in its spec. Its pods are the
// kubelet's (PodResources); the API server is asked for each and for
// each claim they name, never for a list. The kubelet's PodResources
// alone does not say it: it names only the claims of a pod's containers
// (not of its init containers, which a pod's new sandbox runs again).
type ClaimsInUse func(ctx context.Context) (map[types.UID]bool, error)

// ReadTruth reads the Truth: the kubelet's pods, then each of them and
// each claim they name and each of recorded (the checkpoint's) from the
// API server, one at a time: a node never lists the cluster's claims.
type ReadTruth func(ctx context.Context, recorded []types.NamespacedName) (Truth, error)

// ErrNotRebuilt is wrapped by Rebuild's error when it did nothing: the
// Truth, the checkpoint or the lock could not be had. Rebuild is to be
// tried again.
var ErrNotRebuilt = errors.New("prepared claims not rebuilt")

// Rebuild makes the checkpoint and the plugins agree with the kubelet
// and the API server, once the pools are set and before the driver
// registers: the checkpoint is a cache, which may have been set aside
// (OpenCheckpoint), deleted, or written before a reboot that emptied the
// plugins' state.
//
//   - Every claim in use here (Truth.InUse: reserved for a pod the
//     kubelet runs, which will unprepare it), or that the kubelet names,
//     that the API server has allocated with this driver is prepared
//     again (Prepare: its ADDs repeated, its record and CDI spec
//     written), so that a running pod keeps its devices and a restarted
//     container finds its spec. A claim reserved for a pod the kubelet
//     does not run (rejected, deleted before its Prepare, finished) is
//     not: nothing would unprepare it. Without the kubelet, the recorded
//     claims still allocated and reserved are prepared again.
//   - With the kubelet asked (else nothing is released), a recorded claim
//     the API server no longer has allocated is unprepared; what else the
//     DRA drop-ins hold is looked after as Sweep does (collect): nothing
//     of it is released before the grace.
//
// A claim that cannot be prepared is in the error, and the others go on;
// what an earlier Prepare of it did, and what the plugins held of it,
// stays.
//
// It reads the Truth (read) under the lock of Prepare and Unprepare, and
// with PluginDir set under the library's lock of the calls, the
// checkpoint read anew (lockCalls): the other bridge of a rolling update
// serves the kubelet until this one registers, and a claim it prepares
// is in the checkpoint before its ADDs run. Read before the lock, the
// kubelet's claims could miss one that the other bridge prepared in
// between, whose record and ADDs would then be taken for leftovers.
func (p *Preparer) Rebuild(ctx context.Context, read ReadTruth) error {
	unlock, err := p.lockCalls(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotRebuilt, err)
	}
	defer unlock()
	t, err := read(ctx, p.recordedNames())
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
	var errs []error
	// The claims gone first: their devices may be a rebuilt claim's.
	if t.Pods != nil {
		errs = append(errs, p.releaseGone(ctx, t.Claims))
	}
	for _, c := range p.toPrepare(t) {
		if _, err := p.prepare(ctx, c, listed); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err))
		}
	}
	if t.Pods != nil {
		errs = append(errs, p.collect(ctx, t.Pods, func(context.Context) (map[types.UID]bool, error) { return t.InUse, nil }))
	}
	return errors.Join(errs...)
}

// recordedNames is the namespace and name of every claim recorded.
func (p *Preparer) recordedNames() []types.NamespacedName {
	var out []types.NamespacedName
	for _, uid := range p.Checkpoint.UIDs() {
		rec, _ := p.Checkpoint.Get(uid)
		out = append(out, types.NamespacedName{Namespace: rec.Namespace, Name: rec.Name})
	}
	return out
}

// releaseGone unprepares each recorded claim that claims, the API
// server's, no longer has allocated with this driver: gone, or another
// claim of its name, or deallocated.
func (p *Preparer) releaseGone(ctx context.Context, claims map[string]*resourceapi.ResourceClaim) error {
	var errs []error
	for _, uid := range p.Checkpoint.UIDs() {
		rec, _ := p.Checkpoint.Get(uid)
		if c := claims[rec.Namespace+"/"+rec.Name]; c != nil && c.UID == uid && p.ofDriver(c) {
			continue
		}
		p.log().Info("releasing a prepared claim the API server no longer has allocated", "claim", rec.Namespace+"/"+rec.Name, "uid", uid)
		errs = append(errs, p.unprepare(ctx, uid, rec))
	}
	return errors.Join(errs...)
}

// unprepare DELs rec, the record of claim uid, forgets it and removes its
// CDI spec.
func (p *Preparer) unprepare(ctx context.Context, uid types.UID, rec Claim) error {
	if err := p.release(ctx, uid, rec); err != nil {
		return err
	}
	return p.CDI.RemoveFile(SpecFile(uid))
}

// toPrepare is the claims of t to prepare again, in the order of their
// names, each allocated with this driver and reserved: with the kubelet
// asked, those in use here and those it names; without, those recorded.
func (p *Preparer) toPrepare(t Truth) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for _, name := range slices.Sorted(maps.Keys(t.Claims)) {
		c := t.Claims[name]
		if !p.ofDriver(c) || len(c.Status.ReservedFor) == 0 {
			continue
		}
		if t.Pods != nil && (t.InUse[c.UID] || t.Pods.Claims[name]) || t.Pods == nil && p.isRecorded(c.UID) {
			out = append(out, c)
		}
	}
	return out
}

// Sweep releases, every reclaim period, what the DRA drop-ins' plugins
// hold that nothing will release (collect), and tells what the device
// plugins' allocations and the leftovers hold, to leave out of the
// slices. It asks the kubelet (pods), and the API server (inUse) only
// for a recorded claim the kubelet has not named for the grace.
func (p *Preparer) Sweep(ctx context.Context, pods *reclaim.Pods, inUse ClaimsInUse) error {
	unlock, err := p.lockCalls(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return p.collect(ctx, pods, inUse)
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

// slotForm is the end of a device plugins' slot id, <instance>-<i>, of an
// instance named <pool>-<hash> (instance.Name): <hash>-<i>. A claim's
// request-id, <claim UID>-<n>, ends with 12 hex digits, not 8.
var slotForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9]+$`)

// anySlotForm is a device plugins' slot id of any pool.
var anySlotForm = regexp.MustCompile(`.-[0-9a-f]{8}-[0-9]+$`)

// anySlot says whether requestID is a device plugins' slot id, of any
// pool: of a drop-in that shares a DRA drop-in's plugin state too.
func anySlot(requestID string) bool { return anySlotForm.MatchString(requestID) }

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

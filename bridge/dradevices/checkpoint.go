package dradevices

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/atomicfile"
)

// checkpointVersion is the format of the checkpoint file; a file of
// another version is refused rather than guessed at.
const checkpointVersion = 1

// ErrCheckpoint is wrapped by the error of a checkpoint file that cannot
// be read as one (LoadCheckpoint), and by OpenCheckpoint's when such a
// file cannot even be moved aside.
var ErrCheckpoint = errors.New("unreadable DRA checkpoint")

// Claim is what was prepared, or is being prepared, for one claim: the
// checkpoint's record of it.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Devices are the claim's allocation results of this driver, in the
	// order of the claim's status.
	Devices []PreparedDevice `json:"devices"`
}

// PreparedDevice is one allocated device of a claim and its ADD.
type PreparedDevice struct {
	Request string `json:"request"` // the claim's request (or subrequest) name
	Pool    string `json:"pool"`    // the bridge's pool name, e.g. "gpu-drm"
	// Shared says the device was allocated from the pool's shared DRA
	// pool (SharedPoolName), not from this node's (PoolName).
	Shared bool   `json:"shared,omitempty"`
	Device string `json:"device"` // the DRA device name
	ID     string `json:"id"`     // the inventory id, pinned with CDI_REQUEST_DEVICES
	// Resource is the resource-spec requested, e.g. "gpu".
	Resource string `json:"resource"`
	// RequestID is CDI_REQUEST_ID of its ADD and DEL.
	RequestID string     `json:"requestId"`
	ShareID   *types.UID `json:"shareId,omitempty"`
	// AdminAccess is a result for administrative access: the container
	// gets the device as INFO describes it (Result, made without an ADD),
	// and no slot is taken; there is nothing to DEL.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Result is what ADD returned; nil while the ADD has not succeeded
	// (recorded before it runs, so that an Unprepare that comes after a
	// crash in between still runs its DEL).
	Result *spec.AddResult `json:"result,omitempty"`
}

// Prepared says whether every device of c has its ADD result.
func (c Claim) Prepared() bool {
	for _, d := range c.Devices {
		if d.Result == nil {
			return false
		}
	}
	return true
}

// Checkpoint is the claims this node prepared, kept in a file that every
// change replaces atomically. Safe for concurrent use.
//
// It is a cache: what the plugins hold is their LIST, and which claims
// are prepared here the API server's allocations and the kubelet's
// containers say (Preparer.Rebuild). It records what to DEL at Unprepare,
// for the kubelet names a claim to unprepare only by its UID.
type Checkpoint struct {
	path string
	// bootID is the boot the file records (the kernel's boot id), and
	// every change writes this one.
	bootID string
	mu     sync.Mutex
	claims map[types.UID]Claim
}

// maxCheckpoint bounds what is read of the checkpoint: a claim's record
// is some hundred bytes per device.
const maxCheckpoint = 64 << 20

type checkpointFile struct {
	Version int `json:"version"`
	// BootID is the kernel's boot id when the file was written; none
	// before the bridge recorded it.
	BootID string              `json:"bootId,omitempty"`
	Claims map[types.UID]Claim `json:"claims"`
}

// LoadCheckpoint reads the checkpoint at path; a missing file is an empty
// checkpoint, one that cannot be read or decoded an error wrapping
// ErrCheckpoint.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	f, err := readCheckpoint(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Checkpoint{path: path, claims: map[types.UID]Claim{}}, nil
	case err != nil:
		return nil, err
	}
	return &Checkpoint{path: path, bootID: f.BootID, claims: f.Claims}, nil
}

// Reload reads the file again, for what another process wrote to it:
// the other bridge of a rolling update, which prepares and unprepares
// claims under the same lock (dra.CallLock), and which its caller holds.
// The boot recorded stays this process's, which its next change writes.
//
// A file that is not there (deleted, or set aside by the other bridge)
// leaves the records as they were, and so does one that cannot be read,
// which is moved aside as OpenCheckpoint does (the SetAside says where);
// the next change writes the records anew. The error is for a file that
// cannot be moved aside either.
func (c *Checkpoint) Reload(now time.Time) (*SetAside, error) {
	f, err := readCheckpoint(c.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return moveAside(c.path, ReasonUnreadable, err, now)
	}
	c.mu.Lock()
	c.claims = f.Claims
	c.mu.Unlock()
	return nil, nil
}

// readCheckpoint decodes the file at path, its Claims never nil. The
// error wraps fs.ErrNotExist for a missing file, else ErrCheckpoint.
func readCheckpoint(path string) (checkpointFile, error) {
	var f checkpointFile
	data, err := atomicfile.ReadRegular(path, maxCheckpoint)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, err
	case err != nil:
		return f, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("%w: %s: %w", ErrCheckpoint, path, err)
	}
	if f.Version != checkpointVersion {
		return f, fmt.Errorf("%w: %s: version %d, want %d", ErrCheckpoint, path, f.Version, checkpointVersion)
	}
	if f.Claims == nil {
		f.Claims = map[types.UID]Claim{}
	}
	return f, nil
}

// BootID is the boot the checkpoint records: the kernel's boot id when
// it was written, "" where unknown.
func (c *Checkpoint) BootID() string { return c.bootID }

// SetAside says why OpenCheckpoint moved a file aside, and where to.
type SetAside struct {
	// Reason is ReasonUnreadable or ReasonPreviousBoot.
	Reason string
	// Path is where the file now is, kept for the operator.
	Path string
	// Err is why it could not be read; nil for a previous boot's.
	Err error
}

// Reasons a checkpoint file is set aside.
const (
	ReasonUnreadable   = "unreadable"
	ReasonPreviousBoot = "previous-boot"
)

// OpenCheckpoint is the checkpoint at path as the bridge starts with it:
// the file's, unless it cannot be read (truncated, of the wrong types, a
// link, a FIFO, too large) or was written in another boot than bootID
// (the plugins dropped that boot's allocations), in which case it is
// moved aside to <path>.<reason>-<time> and the checkpoint starts empty,
// for Preparer.Rebuild to fill from the API server and the plugins. The
// error is for a file that cannot be moved aside either. A missing file
// is an empty checkpoint; an empty bootID is a boot not known, which
// sets no file aside.
func OpenCheckpoint(path, bootID string, now time.Time) (*Checkpoint, *SetAside, error) {
	c, err := LoadCheckpoint(path)
	var aside *SetAside
	switch {
	case err != nil:
		aside, err = moveAside(path, ReasonUnreadable, err, now)
	case bootID != "" && c.bootID != "" && c.bootID != bootID:
		aside, err = moveAside(path, ReasonPreviousBoot, nil, now)
	}
	if err != nil {
		return nil, nil, err
	}
	if aside != nil {
		c = &Checkpoint{path: path, claims: map[types.UID]Claim{}}
	}
	c.bootID = bootID
	return c, aside, nil
}

// moveAside moves the checkpoint at path aside to <path>.<reason>-<time>,
// cause being why it cannot be read (nil for a previous boot's). The
// error is for a file that cannot be moved.
func moveAside(path, reason string, cause error, now time.Time) (*SetAside, error) {
	a := &SetAside{Reason: reason, Err: cause, Path: fmt.Sprintf("%s.%s-%s", path, reason, now.UTC().Format("20060102T150405Z"))}
	if err := os.Rename(path, a.Path); err != nil {
		return nil, fmt.Errorf("%w: %s cannot be moved aside: %w", ErrCheckpoint, path, errors.Join(cause, err))
	}
	return a, nil
}

// BootID reads the kernel's boot id, as the plugins record it in their
// state (SPEC.md); "" where it cannot be read.
func BootID() string {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// Get returns a copy of the record of claim uid: what the caller changes
// in it is not recorded until Put.
func (c *Checkpoint) Get(uid types.UID) (Claim, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.claims[uid]
	return cl.clone(), ok
}

// clone is c with a devices slice of its own.
func (c Claim) clone() Claim {
	c.Devices = slices.Clone(c.Devices)
	return c
}

// UIDs returns the claims recorded, sorted.
func (c *Checkpoint) UIDs() []types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.claims))
}

// Named returns the claims recorded under namespace and name, sorted: one
// as a rule; more where a claim of the name was recorded before another.
func (c *Checkpoint) Named(namespace, name string) []types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []types.UID
	for uid, cl := range c.claims {
		if cl.Namespace == namespace && cl.Name == name {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out
}

// Put records a copy of cl as claim uid's and saves the file; on failure
// the record is what it was.
func (c *Checkpoint) Put(uid types.UID, cl Claim) error {
	cl = cl.clone()
	return c.change(func(m map[types.UID]Claim) { m[uid] = cl })
}

// Delete forgets claim uid and saves the file.
func (c *Checkpoint) Delete(uid types.UID) error {
	return c.change(func(m map[types.UID]Claim) { delete(m, uid) })
}

func (c *Checkpoint) change(edit func(map[types.UID]Claim)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := maps.Clone(c.claims)
	edit(next)
	data, err := json.Marshal(checkpointFile{Version: checkpointVersion, BootID: c.bootID, Claims: next})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return fmt.Errorf("DRA checkpoint: %w", err)
	}
	if err := atomicfile.Write(c.path, data, atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("DRA checkpoint: %w", err)
	}
	c.claims = next
	return nil
}

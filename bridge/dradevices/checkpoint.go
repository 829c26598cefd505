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
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/atomicfile"
)

// checkpointVersion is the format of the checkpoint file; a file of
// another version is refused rather than guessed at.
const checkpointVersion = 1

// ErrCheckpoint is wrapped by the error of a checkpoint file that cannot
// be read as one: Unprepare cannot know what to release without it, so
// the bridge stops rather than start with nothing prepared.
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
type Checkpoint struct {
	path   string
	mu     sync.Mutex
	claims map[types.UID]Claim
}

// maxCheckpoint bounds what is read of the checkpoint: a claim's record
// is some hundred bytes per device.
const maxCheckpoint = 64 << 20

type checkpointFile struct {
	Version int                 `json:"version"`
	Claims  map[types.UID]Claim `json:"claims"`
}

// LoadCheckpoint reads the checkpoint at path; a missing file is an empty
// checkpoint, one that cannot be read or decoded an error wrapping
// ErrCheckpoint.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	claims, err := readCheckpoint(path)
	if err != nil {
		return nil, err
	}
	return &Checkpoint{path: path, claims: claims}, nil
}

// Reload reads the file again, for what another process wrote to it:
// the other bridge of a rolling update, which prepares and unprepares
// claims under the same lock (dra.CallLock). On error the records are
// what they were.
func (c *Checkpoint) Reload() error {
	claims, err := readCheckpoint(c.path)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.claims = claims
	c.mu.Unlock()
	return nil
}

func readCheckpoint(path string) (map[types.UID]Claim, error) {
	data, err := atomicfile.ReadRegular(path, maxCheckpoint)
	if errors.Is(err, fs.ErrNotExist) {
		return map[types.UID]Claim{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCheckpoint, path, err)
	}
	if f.Version != checkpointVersion {
		return nil, fmt.Errorf("%w: %s: version %d, want %d", ErrCheckpoint, path, f.Version, checkpointVersion)
	}
	if f.Claims == nil {
		return map[types.UID]Claim{}, nil
	}
	return f.Claims, nil
}

// Get returns the record of claim uid.
func (c *Checkpoint) Get(uid types.UID) (Claim, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.claims[uid]
	return cl, ok
}

// UIDs returns the claims recorded, sorted.
func (c *Checkpoint) UIDs() []types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.claims))
}

// Put records claim uid and saves the file; on failure the record is
// what it was.
func (c *Checkpoint) Put(uid types.UID, cl Claim) error {
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
	data, err := json.Marshal(checkpointFile{Version: checkpointVersion, Claims: next})
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

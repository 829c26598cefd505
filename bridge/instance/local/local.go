package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/fanout"
	"github.com/cdiexec/cdi/spec/atomicfile"
)

// ErrCorrupt is wrapped when the file does not parse; the error names it.
var ErrCorrupt = errors.New("instance file is corrupt")

// Store keeps the Instances in the file Path.
type Store struct {
	path string
	// PollInterval is how often Changes looks for other processes' writes.
	PollInterval time.Duration

	changes fanout.Fanout
	// mu guards stop, the running poll's stop channel.
	mu   sync.Mutex
	stop chan struct{}
}

var _ instance.Store = (*Store)(nil)

// New returns a Store on the file path, created on first write.
func New(path string) *Store {
	return &Store{path: path, PollInterval: 250 * time.Millisecond}
}

// document is the file's content.
type document struct {
	Generation int64                         `json:"generation"`
	Instances  map[string]*instance.Instance `json:"instances"`
}

func (s *Store) lock() (func(), error) {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return nil, fmt.Errorf("instance store: %w", err)
	}
	// A link at the lock's path is an error, not a file to create or open.
	fl := flock.New(s.path+".lock", flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW))
	if err := fl.Lock(); err != nil {
		return nil, fmt.Errorf("locking %s: %w", s.path, err)
	}
	return func() { _ = fl.Unlock() }, nil
}

func (s *Store) read() (*document, error) {
	doc := &document{Instances: map[string]*instance.Instance{}}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return doc, nil
	}
	if err != nil {
		return nil, fmt.Errorf("instance store: %w", err)
	}
	if err := json.Unmarshal(data, doc); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", s.path, ErrCorrupt, err)
	}
	if doc.Instances == nil {
		doc.Instances = map[string]*instance.Instance{}
	}
	return doc, nil
}

func (s *Store) write(doc *document) error {
	doc.Generation++
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	// The directory is synced: the claims must survive a power failure,
	// and unlike a plugin's state they carry no boot id to expire by.
	if err := atomicfile.Write(s.path, data, atomicfile.Options{Perm: 0o644}); err != nil {
		return fmt.Errorf("instance store: %w", err)
	}
	return nil
}

// update runs fn on the document under the lock and writes it if fn
// succeeds and says it changed something.
func (s *Store) update(fn func(*document) (bool, error)) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	doc, err := s.read()
	if err != nil {
		return err
	}
	changed, err := fn(doc)
	if err != nil || !changed {
		return err
	}
	if err := s.write(doc); err != nil {
		return err
	}
	s.notify()
	return nil
}

// List returns every Instance, sorted by name.
func (s *Store) List(ctx context.Context) ([]instance.Instance, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	doc, err := s.read()
	if err != nil {
		return nil, err
	}
	out := make([]instance.Instance, 0, len(doc.Instances))
	for _, in := range doc.Instances {
		in.Version = strconv.FormatInt(doc.Generation, 10)
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

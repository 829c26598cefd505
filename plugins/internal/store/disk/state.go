package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cdiexec/cdi/plugins/internal/store"
)

// load reads the state file. It returns the state and its encoding as
// loaded, against which the state after fn is compared. A missing file is
// an empty state.
func (s *Store) load() (*store.State, []byte, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		st := store.NewState(s.bootID)
		enc, err := store.Encode(st)
		return st, enc, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read state file: %w", err)
	}
	st, err := store.Decode(data)
	if err != nil {
		return nil, nil, fmt.Errorf("state file %s: %w: %w", s.path, store.ErrCorrupt, err)
	}
	// Compare against the re-encoded state, not the bytes read, so that a
	// file a human reformatted is not rewritten when nothing changed.
	enc, err := store.Encode(st)
	if err != nil {
		return nil, nil, fmt.Errorf("state file %s: %w", s.path, err)
	}
	return st, enc, nil
}

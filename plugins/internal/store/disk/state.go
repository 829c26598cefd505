package disk

import (
	"encoding/json"
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
		enc, err := encode(st)
		return st, enc, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read state file: %w", err)
	}
	st, err := decode(data)
	if err != nil {
		return nil, nil, fmt.Errorf("state file %s: %w: %w", s.path, store.ErrCorrupt, err)
	}
	// Compare against the re-encoded state, not the bytes read, so that a
	// file a human reformatted is not rewritten when nothing changed.
	enc, err := encode(st)
	if err != nil {
		return nil, nil, fmt.Errorf("state file %s: %w", s.path, err)
	}
	return st, enc, nil
}

// decode parses and checks a state document.
func decode(data []byte) (*store.State, error) {
	// Writes go through rename, so no crash can leave an empty file: one
	// is damage from outside and must not pass for "no allocations".
	if len(data) == 0 {
		return nil, errors.New("file is empty")
	}
	var st store.State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	if err := check(&st); err != nil {
		return nil, err
	}
	return &st, nil
}

// check reports what makes st unfit to be stored or used. It runs on every
// load and before every save, so nothing is written that would not load.
func check(st *store.State) error {
	if st.Format != store.FormatVersion {
		return fmt.Errorf("format is %d, want %d", st.Format, store.FormatVersion)
	}
	// An "allocations" key that is missing or null may be a truncated or
	// hand-edited document; only an explicit {} means "none".
	if st.Allocations == nil {
		return errors.New(`"allocations" is missing or null`)
	}
	for id, rec := range st.Allocations {
		if rec == nil {
			return fmt.Errorf("allocation %q is null", id)
		}
	}
	return nil
}

// encode returns the stored form of st: indented for humans, and
// deterministic (encoding/json sorts map keys) so that equal states encode
// to equal bytes. It refuses a state that check refuses.
func encode(st *store.State) ([]byte, error) {
	if err := check(st); err != nil {
		return nil, fmt.Errorf("refusing to save: %w", err)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return append(data, '\n'), nil
}

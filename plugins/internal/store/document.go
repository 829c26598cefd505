package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The rules of the stored document, shared by every Store so that a fake
// refuses exactly what the disk store refuses.

// ErrUnsavable is wrapped by Encode's refusals: a state that breaks Check.
var ErrUnsavable = errors.New("refusing to save")

// Check reports what makes st unfit to be stored or used. Stores run it on
// every load and before every save, so nothing is written that would not
// load.
func Check(st *State) error {
	if st.Format != FormatVersion {
		return fmt.Errorf("format is %d, want %d", st.Format, FormatVersion)
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

// Encode returns the stored form of st: indented for humans, and
// deterministic (encoding/json sorts map keys) so that equal states encode
// to equal bytes. It refuses a state that Check refuses.
func Encode(st *State) ([]byte, error) {
	if err := Check(st); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsavable, err)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return append(data, '\n'), nil
}

// Decode parses and checks a stored document. Its errors do not wrap
// ErrCorrupt: the store adds that, with the name of what it read.
func Decode(data []byte) (*State, error) {
	// Writes go through rename, so no crash can leave an empty file: one
	// is damage from outside and must not pass for "no allocations".
	if len(data) == 0 {
		return nil, errors.New("file is empty")
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	if err := Check(&st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Change is the middle of every Update: it drops what an earlier boot
// left (ReconcileBoot), runs fn on st, and returns the document to store,
// or nil when fn changed nothing against before (Encode of st as loaded).
// An error from fn is returned unchanged.
func Change(st *State, before []byte, bootID string, fn func(*State) error) ([]byte, error) {
	st.ReconcileBoot(bootID)
	if err := fn(st); err != nil {
		return nil, err
	}
	after, err := Encode(st)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(before, after) {
		return nil, nil
	}
	return after, nil
}

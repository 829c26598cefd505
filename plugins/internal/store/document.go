package store

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
	"github.com/cdiexec/cdi/spec/jsonwrite"
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
	// A slot that no allocation seems to hold is handed out: a slot held
	// twice, or one below zero, would make a held device look free.
	holder := map[deviceSlot]string{}
	// In key order, so that the error for a state with several faults is
	// always the same one.
	for _, id := range slices.Sorted(maps.Keys(st.Allocations)) {
		rec := st.Allocations[id]
		if rec == nil {
			return fmt.Errorf("allocation %q is null", id)
		}
		if err := spec.CheckRequestID(id); err != nil {
			return fmt.Errorf("allocation key: %w", err)
		}
		for _, u := range rec.Result.Units {
			k := deviceSlot{u.Device, u.Slot}
			switch other, held := holder[k]; {
			case u.Slot < 0:
				return fmt.Errorf("allocation %q holds slot %d of device %q: no slot is negative", id, u.Slot, u.Device)
			case held:
				return fmt.Errorf("allocations %q and %q both hold slot %d of device %q", other, id, u.Slot, u.Device)
			}
			holder[k] = id
		}
	}
	return nil
}

// deviceSlot is one usage slot of one device.
type deviceSlot struct {
	device string
	slot   int
}

// Encode returns the stored form of st, as encoding/json's indenting
// encoder writes it: indented for humans, and deterministic (allocations
// in request-id order) so that equal states encode to equal bytes. It
// refuses a state that Check refuses.
func Encode(st *State) ([]byte, error) {
	if err := Check(st); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsavable, err)
	}
	// jsonwrite, the same bytes as encoding/json's encoder, without its
	// start-up cost: see package jsonwrite.
	out, err := jsonwrite.MarshalIndent(st, "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsavable, err)
	}
	return out, nil
}

// Decode parses and checks a stored document. Its errors do not wrap
// ErrCorrupt: the store adds that, with the name of what it read.
//
// A null record stays nil in the map, and a null map nil, for Check to
// refuse; a request-id twice is refused by the reader, as the map would
// keep one of its records and free the slots of the other.
func Decode(data []byte) (*State, error) {
	// Writes go through rename, so no crash can leave an empty file: one
	// is damage from outside and must not pass for "no allocations".
	if len(data) == 0 {
		return nil, errors.New("file is empty")
	}
	v, err := jsonread.Parse(data)
	if err != nil {
		return nil, err
	}
	var st State
	if err := jsonread.Read(v, &st); err != nil {
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

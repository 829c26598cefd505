// Package store defines the slot state every plugin keeps: which request-id
// holds which device slots, and the result ADD returned for it. The disk
// implementation (package disk) keeps it in one JSON document per plugin
// configuration under an exclusive file lock; package fake keeps it in
// memory for unit tests of the allocation logic.
package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cdiexec/cdi/spec"
)

// FormatVersion is the version of the state document's layout. A document
// with another version is refused, never guessed at.
const FormatVersion = 1

// State is the whole slot state of one plugin configuration.
type State struct {
	Format int `json:"format"`
	// BootID is the kernel boot id when the state was last written.
	// Allocations recorded under another boot id are dropped on load.
	BootID      string             `json:"bootID"`
	Allocations map[string]*Record `json:"allocations"`

	// Dropped lists the request-ids dropped on load because they were made
	// before the last reboot. It is not stored; plugins log it.
	Dropped []string `json:"-"`
}

// Record is one allocation: what was asked and what ADD returned.
type Record struct {
	// Request is the canonical CDI_REQUEST (spec.Request.String()).
	Request string `json:"request"`
	// Devices is CDI_REQUEST_DEVICES as given, if any.
	Devices []string `json:"devices,omitempty"`
	// NUMANodes is CDI_REQUEST_NUMA_LOCALITY as given, if any.
	NUMANodes []int     `json:"numaNodes,omitempty"`
	Created   time.Time `json:"created"`
	// Result is the full (0.1.0) result; older callers get it downgraded.
	// Result.Units says which device slots the allocation holds.
	Result spec.AddResult `json:"result"`
}

// Store gives exclusive, crash-safe access to one State.
type Store interface {
	// Update locks the state exclusively, loads it, and runs fn on it. If fn
	// returns nil and changed the state, the new state is saved atomically
	// before the lock is released: after a crash at any instant the stored
	// state is either the old or the new one. If fn returns an error,
	// nothing is saved and that error is returned unchanged.
	Update(ctx context.Context, fn func(*State) error) error
	// View loads the state and runs fn on it, with no lock and no save,
	// for the read-only commands (INFO, LIST): saves replace the state
	// whole, so View sees one some save left, and with no state yet it
	// sees an empty one and creates nothing (no directory, no lock file),
	// so that a user without write access can read. Allocations made
	// before the last reboot are left out, as a load drops them.
	View(ctx context.Context, fn func(*State) error) error
}

// ErrCorrupt is wrapped by the error a store returns when the stored state
// cannot be parsed or has an unknown format. The error names the file.
var ErrCorrupt = errors.New("state is corrupt")

// NewState returns an empty state for the given boot id.
func NewState(bootID string) *State {
	return &State{Format: FormatVersion, BootID: bootID, Allocations: map[string]*Record{}}
}

// ReconcileBoot drops the allocations made before the last reboot (the
// devices they held were released when the machine went down), lists them
// in Dropped, and records bootID. An empty boot id on either side is
// unknown, and nothing is dropped because of it. Every Store calls it on
// load.
func (st *State) ReconcileBoot(bootID string) {
	if bootID == "" || st.BootID == bootID {
		return
	}
	if st.BootID != "" {
		for id := range st.Allocations {
			st.Dropped = append(st.Dropped, id)
		}
		slices.Sort(st.Dropped)
		st.Allocations = map[string]*Record{}
	}
	st.BootID = bootID
}

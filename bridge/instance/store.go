package instance

import (
	"context"
	"errors"
	"fmt"
)

// Claim sets one slot to a usage value.
type Claim struct {
	Instance string
	Slot     string
	// Value is the usage the claim sets (InstanceLevelUsage or ConfigurationLevelUsage).
	Value string
}

// Errors a Store's Claim wraps.
var (
	// ErrSlotTaken: the slot holds another usage than the claim's.
	ErrSlotTaken = errors.New("slot is in use")
	// ErrNoSlot: the instance or the slot does not exist.
	ErrNoSlot = errors.New("no such slot")
	// ErrUnknownOutcome: a write may or may not have been recorded (the
	// connection broke after the request went out), so its claims may be
	// held. Releasing them is the caller's to do; Release frees only
	// slots that hold exactly the claim's value, so it is harmless where
	// the write was not recorded.
	ErrUnknownOutcome = errors.New("outcome unknown: the store may have recorded it")
)

// ErrIncomplete is wrapped by a List error that comes with a partial
// list: every pool's Instances are there but those of the pools the
// error names (IncompleteError), which a store that follows pools one by
// one has not read yet. A caller that acts on what the list lacks (slot
// reclaim, GC) must leave those pools alone; it may act on the others.
var ErrIncomplete = errors.New("the list lacks some pools")

// IncompleteError names the pools a partial list lacks; it wraps Err and
// ErrIncomplete. With no Pools, which pools lack Instances cannot be
// told: the whole list is partial.
type IncompleteError struct {
	Pools []string
	Err   error
}

// Lacking returns the pools a partial list lacks, from List's error: nil
// when err is not an IncompleteError, or names none (nothing in the
// list can be relied on).
func Lacking(err error) map[string]bool {
	var incomplete *IncompleteError
	if !errors.As(err, &incomplete) || len(incomplete.Pools) == 0 {
		return nil
	}
	out := make(map[string]bool, len(incomplete.Pools))
	for _, p := range incomplete.Pools {
		out[p] = true
	}
	return out
}

func (e *IncompleteError) Error() string { return fmt.Sprintf("%v: pools %q", e.Err, e.Pools) }

func (e *IncompleteError) Unwrap() []error { return []error{e.Err, ErrIncomplete} }

// Store keeps the Instances. Implementations are safe for concurrent use,
// and by several processes or nodes at once where they say so.
type Store interface {
	// List returns every Instance.
	List(ctx context.Context) ([]Instance, error)
	// Observe records that node sees exactly the devices seen (Name,
	// Config, DeviceID, Shared, Capacity, Properties set) of the pool
	// config: missing Instances are created with every slot free, node is
	// added to their Nodes, capacity and properties are updated; node is
	// removed from the pool's other Instances. Shrinking capacity drops
	// only free slots: a claimed slot above the new capacity stays until
	// it is released. An Instance that no node sees and whose slots are
	// all free is deleted.
	Observe(ctx context.Context, node, config string, seen []Instance) error
	// Claim sets every claim's slot to its Value, all or nothing. A slot
	// must be free or hold exactly Value already (a repeated claim is not
	// an error); otherwise nothing changes and the error wraps
	// ErrSlotTaken or ErrNoSlot.
	Claim(ctx context.Context, claims []Claim) error
	// Release frees each slot that holds exactly its claim's Value, and
	// leaves the others alone: a release never undoes someone else's
	// claim.
	Release(ctx context.Context, claims []Claim) error
	// Changes returns a channel that receives after any change to the
	// store, made here or elsewhere, and a function to stop receiving.
	// Sends are coalesced: a receiver calls List for the current state.
	Changes() (<-chan struct{}, func())
}

package fake

import (
	"context"
	"fmt"
	"sync"

	"github.com/cdiexec/cdi/plugins/internal/store"
)

// Store is an in-memory store.Store, safe for concurrent use. The zero
// value is not usable; call New.
type Store struct {
	bootID string
	*memory
}

// memory is the stored state, which stores made by WithBootID share as
// the calls of one plugin share its state file.
type memory struct {
	mu       sync.Mutex
	state    []byte // the stored state's encoding; nil until first saved
	failLoad error
	failSave error
	saves    int
}

var _ store.Store = (*Store)(nil)

// New returns an empty Store for the given boot id.
func New(bootID string) *Store {
	return &Store{bootID: bootID, memory: &memory{}}
}

// WithBootID returns a Store over the same stored state, failures and
// count of saves as s, for calls made under another boot id: after a
// reboot, or where the boot id is unknown ("").
func (s *Store) WithBootID(bootID string) *Store {
	return &Store{bootID: bootID, memory: s.memory}
}

// Update implements store.Store.
func (s *Store) Update(ctx context.Context, fn func(*store.State) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failLoad != nil {
		return fmt.Errorf("load fake state: %w", s.failLoad)
	}
	st, before, err := s.load()
	if err != nil {
		return err
	}
	after, err := store.Change(st, before, s.bootID, fn)
	if err != nil || after == nil {
		return err
	}
	if s.failSave != nil {
		return fmt.Errorf("save fake state: %w", s.failSave)
	}
	s.state = after
	s.saves++
	return nil
}

// View implements store.Store.
func (s *Store) View(ctx context.Context, fn func(*store.State) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.failLoad != nil {
		s.mu.Unlock()
		return fmt.Errorf("load fake state: %w", s.failLoad)
	}
	st, _, err := s.load()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	st.ReconcileBoot(s.bootID)
	st.Dropped = nil
	return fn(st)
}

// load decodes a fresh copy of the stored state, so that nothing fn does
// to it or keeps of it reaches the stored state unless it is saved.
func (s *Store) load() (*store.State, []byte, error) {
	if s.state == nil {
		st := store.NewState(s.bootID)
		enc, err := store.Encode(st)
		return st, enc, err
	}
	st, err := store.Decode(s.state)
	if err != nil {
		return nil, nil, fmt.Errorf("fake state: %w: %w", store.ErrCorrupt, err)
	}
	return st, s.state, nil
}

// SetState replaces the stored state with a copy of st, as if it had been
// saved by an earlier run (possibly under another boot id). It fails, and
// keeps the old state, if st could not be saved by package disk.
func (s *Store) SetState(st *store.State) error {
	enc, err := store.Encode(st)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = enc
	return nil
}

// State returns a copy of the stored state: an empty state for the store's
// boot id if nothing was saved yet. Dropped is always empty, as it is not
// stored.
func (s *Store) State() *store.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, _, err := s.load()
	if err != nil {
		// s.state is only ever set from encode, so it always decodes.
		panic(err)
	}
	return st
}

// SetFailSave makes every following Update whose fn changed the state fail
// with an error wrapping err, without saving; nil makes saves succeed again.
func (s *Store) SetFailSave(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failSave = err
}

// SetFailLoad makes every following Update fail with an error wrapping err
// before fn runs, as disk does for an unreadable or corrupt file (pass
// store.ErrCorrupt for that); nil makes loads succeed again.
func (s *Store) SetFailLoad(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLoad = err
}

// Saves returns how many Updates saved a changed state.
func (s *Store) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cdiexec/cdi/bridge/instance"
)

// rollbackTimeout bounds the release of a partial claim, which runs even
// when the caller's context has ended: a claim must not outlive a failed
// Allocate.
const rollbackTimeout = 10 * time.Second

// Claim implements instance.Store. Claims on one Instance are one write;
// claims on several are written one Instance at a time, in name order,
// and released again if a later one fails.
func (s *Store) Claim(ctx context.Context, claims []instance.Claim) error {
	var done []instance.Claim
	for _, group := range byInstance(claims) {
		err := s.modify(ctx, group[0].Instance, verify, func(in *instance.Instance) (bool, error) {
			changed := false
			for _, c := range group {
				ch, err := in.Apply(c)
				if err != nil {
					return false, err
				}
				changed = changed || ch
			}
			if changed {
				hook(s.test.claimWrite, in.Name)
			}
			return changed, nil
		})
		if err != nil {
			if rerr := s.rollback(ctx, done); rerr != nil {
				// The claims made stay recorded until someone releases them.
				return fmt.Errorf("%w (and releasing the claims made: %w: %w)", err, instance.ErrUnknownOutcome, rerr)
			}
			return err
		}
		done = append(done, group...)
	}
	return nil
}

func (s *Store) rollback(ctx context.Context, claims []instance.Claim) error {
	if len(claims) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	return s.Release(ctx, claims)
}

// Release implements instance.Store.
func (s *Store) Release(ctx context.Context, claims []instance.Claim) error {
	var errs []error
	for _, group := range byInstance(claims) {
		err := s.modify(ctx, group[0].Instance, verify, func(in *instance.Instance) (bool, error) {
			changed := false
			for _, c := range group {
				changed = in.Release(c) || changed
			}
			return changed, nil
		})
		if err != nil && !errors.Is(err, instance.ErrNoSlot) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Observe implements instance.Store. Who sees a device is recorded in
// node's Presence of config, not in the Instance: each seen Instance is
// written only when it is missing or what node sees of it changed
// (capacity, properties), and node's Presence when the set of devices
// changed, so that a node joining writes one object per pool. Nodes that
// a bridge of an older release wrote into an Instance are read as they
// are; node's own name is removed from them (once).
//
// With ServedPools it starts following config's Instances first, unless
// it does, and stops once seen is nil: the pool is no longer served
// (Store.retire), and node's Presence of it is deleted.
//
// An Instance that no node sees any more is not deleted here: that is
// PruneUnseen's, after a grace period, for the elected bridge.
func (s *Store) Observe(ctx context.Context, node, config string, seen []instance.Instance) error {
	if s.scope == ServedPools {
		if err := s.follow(ctx, unlabelledPool); err != nil {
			return err
		}
		if err := s.follow(ctx, config); err != nil {
			return err
		}
		s.serve(config, node, seen != nil)
		if seen == nil {
			defer s.retire(config, node)
		}
	}
	var errs []error
	var names []string
	if seen != nil {
		names = make([]string, 0, len(seen))
	}
	for _, want := range seen {
		names = append(names, want.Name)
		errs = append(errs, s.describe(ctx, node, want))
		hook(s.test.described, want.Name)
	}
	sort.Strings(names)
	errs = append(errs, s.writePresence(ctx, node, config, slices.Compact(names)))
	errs = append(errs, s.forgetLegacy(ctx, node, config, names))
	return errors.Join(errs...)
}

// describe writes want's Instance if it is missing, says something else
// of the device than want, lacks its pool label, or names node among the
// nodes an older bridge recorded.
func (s *Store) describe(ctx context.Context, node string, want instance.Instance) error {
	relabel, err := s.unlabelled(ctx, want.Name, want.Config)
	if err != nil {
		return err
	}
	return s.modify(ctx, want.Name, upsert, func(in *instance.Instance) (bool, error) {
		described := in.Describe(want)
		forgot := in.Forget(node)
		return described || forgot || relabel, nil
	})
}

// forgetLegacy removes node from the recorded nodes of config's other
// Instances, where a bridge of an older release put it.
func (s *Store) forgetLegacy(ctx context.Context, node, config string, seen []string) error {
	all, err := s.list()
	errs := []error{err}
	for _, in := range all {
		if in.Config != config || slices.Contains(seen, in.Name) || !in.Sees(node) {
			continue
		}
		err := s.modify(ctx, in.Name, update, func(in *instance.Instance) (bool, error) {
			return in.Forget(node), nil
		})
		if !errors.Is(err, instance.ErrNoSlot) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// byInstance groups claims by Instance, in name order.
func byInstance(claims []instance.Claim) [][]instance.Claim {
	groups := map[string][]instance.Claim{}
	for _, c := range claims {
		groups[c.Instance] = append(groups[c.Instance], c)
	}
	out := make([][]instance.Claim, 0, len(groups))
	for _, g := range groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].Instance < out[j][0].Instance })
	return out
}

// modify applies fn to the named Instance and writes the result back,
// guarded by the resourceVersion it read: an Instance that fn leaves
// unused is deleted, a missing one is created with mode upsert (and is
// ErrNoSlot otherwise). The first read is the informer's copy (the API's
// when the informer has none); after a conflict, or a no-op with mode
// verify, the object is read from the API and fn runs again, up to
// s.backoff.Steps attempts in all. Errors from fn end it at once.
//
// The waits between attempts are s.backoff's, through wait's
// DelayFunc.Until rather than retry.OnError: a wait ends with ctx, and
// the Cap of a wait.Backoff stops OnError's attempts early (it sets
// Steps to 0 once the cap is reached), where the DelayFunc only stops
// growing the wait.
func (s *Store) modify(ctx context.Context, name string, mode modifyMode, fn func(*instance.Instance) (bool, error)) error {
	m := &modification{store: s, name: name, mode: mode, fn: fn}
	return s.backoff.DelayFunc().Until(ctx, true, true, m.try)
}

// modification is one modify call and the attempts it has made.
type modification struct {
	store    *Store
	name     string
	mode     modifyMode
	fn       func(*instance.Instance) (bool, error)
	attempts int
}

// try is one attempt, as the condition of wait's loop: done when the
// write succeeded, was not needed or failed for good, not done after a
// conflict while attempts remain.
func (m *modification) try(ctx context.Context) (bool, error) {
	m.attempts++
	in, isNew, err := m.read(ctx, m.attempts > 1)
	if err != nil {
		return true, err
	}
	changed, err := m.fn(in)
	if err == nil && !changed && m.attempts == 1 && m.mode == verify {
		// The informer's copy may be behind (a watch cut and not yet
		// re-established): nothing to do there is not proof that the
		// API holds nothing to do. A release of a claim whose write
		// had an unknown outcome found the slot free in a stale cache
		// and wrote nothing. The API's copy is read at once, as the
		// next attempt.
		m.attempts++
		if in, isNew, err = m.read(ctx, true); err != nil {
			return true, err
		}
		changed, err = m.fn(in)
	}
	if err != nil || !changed {
		return true, err
	}
	return m.write(ctx, in, isNew)
}

// read returns the Instance to change, the informer's copy or, when
// fresh, the API's: a new one (isNew) when it is missing and the mode is
// upsert, ErrNoSlot when it is missing otherwise.
func (m *modification) read(ctx context.Context, fresh bool) (in *instance.Instance, isNew bool, err error) {
	in, err = m.store.read(ctx, m.name, fresh)
	if in == nil && err == nil && !fresh {
		// Not in the cache is not proof of absence: the watch may
		// not have brought a new Instance yet.
		in, err = m.store.read(ctx, m.name, true)
	}
	switch {
	case err != nil:
		return nil, false, err
	case in != nil:
		return in, false, nil
	case m.mode != upsert:
		return nil, false, fmt.Errorf("instance %s: %w", m.name, instance.ErrNoSlot)
	}
	return &instance.Instance{Name: m.name}, true, nil
}

// write writes in and says whether modify is done: not after a conflict
// while attempts remain.
func (m *modification) write(ctx context.Context, in *instance.Instance, isNew bool) (bool, error) {
	err := m.store.write(ctx, in, isNew)
	conflict := apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || (!isNew && apierrors.IsNotFound(err))
	m.store.count(conflict)
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return true, nil
	case !conflict && !errors.As(err, &status):
		// No answer from the API server: the write may have been
		// committed before the connection broke.
		return true, fmt.Errorf("writing instance %s to the API server: %w: %w", m.name, instance.ErrUnknownOutcome, err)
	case !conflict:
		return true, fmt.Errorf("writing instance %s to the API server: %w", m.name, err)
	case m.attempts >= m.store.backoff.Steps:
		return true, fmt.Errorf("instance %s: still conflicting after %d attempts: %w", m.name, m.attempts, err)
	}
	return false, nil
}

// modifyMode says what modify may do.
type modifyMode int

const (
	// update changes an Instance that must exist.
	update modifyMode = iota
	// upsert creates the Instance when it is missing.
	upsert
	// verify is update where a change that is a no-op on the informer's
	// copy is checked against the API: claims and releases, which must
	// not trust a copy that may be behind.
	verify
)

// read returns the named Instance, nil if it does not exist: the
// informer's copy, or the API's when fresh is set.
func (s *Store) read(ctx context.Context, name string, fresh bool) (*instance.Instance, error) {
	if !fresh {
		return s.cached(name)
	}
	obj, err := s.client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading instance %s: %w", name, err)
	}
	// What the API said is newer than the informer may be yet: a caller
	// that lost a race plans again from List, which must show it.
	s.remember(name, obj, "")
	in, err := toInstance(obj)
	return &in, err
}

// write creates or updates in, guarded by in.Version, and remembers the
// result so that List shows it at once. It never deletes: an Instance
// goes by PruneUnseen only.
func (s *Store) write(ctx context.Context, in *instance.Instance, isNew bool) error {
	obj, err := toObject(*in, s.namespace)
	if err != nil {
		return err
	}
	if isNew {
		obj, err = s.client.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
	} else {
		obj, err = s.client.Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
	}
	if err == nil {
		s.remember(in.Name, obj, "")
		s.notify()
	}
	return err
}

// fieldManager names the bridge in the objects' managedFields.
const fieldManager = "cdi-bridge"

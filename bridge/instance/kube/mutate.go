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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cdiexec/cdi/bridge/instance"
)

// rollbackTimeout bounds the release of a partial claim, which runs even
// when the caller's context has ended: a claim must not outlive a failed
// Allocate.
const rollbackTimeout = 10 * time.Second

// Claim implements instance.Store. Claims on one Instance are one write;
// claims on several are written one Instance at a time, in name order,
// and released again if a later one fails.
//
// With ServedPools the pools claimed in stay followed: a claim's
// container ends later, and its release must find the claim in view.
// A pool withdrawn meanwhile (Store.retire) waits for the claim, then
// sees it; one withdrawn before is followed again.
func (s *Store) Claim(ctx context.Context, claims []instance.Claim) error {
	s.following.RLock()
	defer s.following.RUnlock()
	pools := map[string]bool{}
	err := s.claim(ctx, claims, pools)
	if s.scope == ServedPools {
		for pool := range pools {
			err = errors.Join(err, s.follow(ctx, pool))
		}
	}
	return err
}

// claim is Claim; pools receives the pools of the Instances claimed in.
func (s *Store) claim(ctx context.Context, claims []instance.Claim, pools map[string]bool) error {
	var done []instance.Claim
	for _, group := range byInstance(claims) {
		err := s.modify(ctx, group[0].Instance, verify, func(in *instance.Instance) (bool, error) {
			pools[in.Config] = true
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
// guarded by the resourceVersion it read: a missing one is created with
// mode upsert (and is ErrNoSlot otherwise). The first read is the
// informer's copy (the API's when the informer has none, but for upsert,
// which then creates it); after a conflict, or a no-op with mode verify,
// the object is read from the API and fn runs again, up to
// s.backoff.Steps attempts in all. Errors from fn end it at once.
//
// The waits between attempts are s.backoff's, through wait's
// DelayFunc.Until rather than retry.OnError: a wait ends with ctx, and
// the Cap of a wait.Backoff stops OnError's attempts early (it sets
// Steps to 0 once the cap is reached), where the DelayFunc only stops
// growing the wait.
func (s *Store) modify(ctx context.Context, name string, mode modifyMode, fn func(*instance.Instance) (bool, error)) error {
	return s.run(ctx, &modification{store: s, name: name, mode: mode, fn: fn})
}

func (s *Store) run(ctx context.Context, m *modification) error {
	return s.backoff.DelayFunc().Until(ctx, true, true, m.try)
}

// modification is one modify call and the attempts it has made.
type modification struct {
	store *Store
	name  string
	mode  modifyMode
	fn    func(*instance.Instance) (bool, error)
	// rewrite, when set, has an object written again where fn changes
	// nothing (Observe: a pool label missing, the elected bridge's mark).
	rewrite func(*unstructured.Unstructured) bool
	// first says how the first attempt reads.
	first    readPlan
	attempts int
}

// readPlan is how a modification's first attempt reads the Instance: by
// default the informer's copy.
type readPlan struct {
	// fresh reads the API server's copy.
	fresh bool
	// given is set when the caller has read the API server's copy
	// already: obj, nil for none.
	given bool
	obj   *unstructured.Unstructured
}

// try is one attempt, as the condition of wait's loop: done when the
// write succeeded, was not needed or failed for good, not done after a
// conflict while attempts remain.
func (m *modification) try(ctx context.Context) (bool, error) {
	m.attempts++
	in, isNew, changed, err := m.apply(ctx, m.attempts > 1)
	if err == nil && !changed && m.attempts == 1 && m.mode == verify {
		// The informer's copy may be behind (a watch cut and not yet
		// re-established): nothing to do there is not proof that the
		// API holds nothing to do. A release of a claim whose write
		// had an unknown outcome found the slot free in a stale cache
		// and wrote nothing. The API's copy is read at once, as the
		// next attempt.
		m.attempts++
		in, isNew, changed, err = m.apply(ctx, true)
	}
	if err != nil || !changed {
		return true, err
	}
	return m.write(ctx, in, isNew)
}

// apply reads the Instance (the API's copy when fresh) and runs fn on
// it: a new one (isNew) when it is missing and the mode is upsert,
// ErrNoSlot when it is missing otherwise.
func (m *modification) apply(ctx context.Context, fresh bool) (in *instance.Instance, isNew, changed bool, err error) {
	obj, err := m.read(ctx, fresh)
	switch {
	case err != nil:
		return nil, false, false, err
	case obj != nil:
		i, err := toInstance(obj)
		if err != nil {
			return nil, false, false, err
		}
		in = &i
	case m.mode != upsert:
		return nil, false, false, fmt.Errorf("instance %s: %w", m.name, instance.ErrNoSlot)
	default:
		in, isNew = &instance.Instance{Name: m.name}, true
	}
	changed, err = m.fn(in)
	if obj != nil && m.rewrite != nil && m.rewrite(obj) {
		changed = true
	}
	return in, isNew, changed, err
}

// read returns the object to change, nil when there is none: the API's
// copy when fresh, else as m.first says.
func (m *modification) read(ctx context.Context, fresh bool) (*unstructured.Unstructured, error) {
	switch {
	case fresh || m.first.fresh:
		return m.store.fetch(ctx, m.name)
	case m.first.given:
		return m.first.obj, nil
	}
	obj, err := m.store.newest(m.name)
	if obj != nil || err != nil || m.mode == upsert {
		// upsert creates what the cache lacks; if the API server has
		// it after all, the creation conflicts and the next attempt
		// reads it.
		return obj, err
	}
	// Not in the cache is not proof of absence: the watch may not have
	// brought a new Instance yet.
	return m.store.fetch(ctx, m.name)
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

// fetch reads the named Instance from the API server, nil when there is
// none. What the API said is newer than the informer may be yet: it is
// remembered, since a caller that lost a race plans again from List,
// which must show it.
func (s *Store) fetch(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	obj, err := s.client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading instance %s: %w", name, err)
	}
	s.remember(name, obj, "")
	return obj, nil
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

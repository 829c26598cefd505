package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// AnnotationUnseen marks an Instance the elected bridge is about to
// delete (PruneUnseen): when it looked, no Presence listed it and no slot
// of it was held. Its value is when. A bridge's every write of an
// Instance drops it (toObject writes no annotations), and the deletion,
// guarded by the mark's resourceVersion, then fails.
const AnnotationUnseen = Group + "/unseen"

// marked reports whether obj carries the elected bridge's mark.
func marked(obj *unstructured.Unstructured) bool {
	_, ok := obj.GetAnnotations()[AnnotationUnseen]
	return ok
}

// PruneUnseen deletes the Instances that no node has seen, and whose
// slots are all free, since grace before now (as this Store has watched:
// the clock of an object starts at the first call that finds it unseen)
// and that were created at least grace before now. It returns how many
// it deleted.
//
// A node's "I see X" must win over this "nobody sees X", and they are
// two objects, which the API server cannot write together. So for each
// pool with Instances due it marks each (AnnotationUnseen, a write
// guarded by the resourceVersion of the API server's copy, which must
// still be unseen and free), then lists the pool's Presences from the API
// server, and deletes each marked Instance none of them lists, guarded by
// the mark's resourceVersion. A node whose Presence listed X before that
// list keeps X; one that lists X later reads X afresh after writing its
// Presence (Observe), finds the mark and writes X, and the deletion
// fails; a claim on X writes it too. The one interleaving left, a
// deletion between such a node's Presence write and its read of X, is
// within that node's Observe, which creates X again before it returns.
//
// It is for the one bridge that clears departed nodes, with AllPools:
// a device unplugged and plugged again, a bridge restarting, a drop-in
// edited keep their Instances (and so their slots' names) through grace.
func (s *Store) PruneUnseen(ctx context.Context, grace time.Duration, now time.Time) (int, error) {
	due, err := s.dueUnseen(grace, now)
	errs := []error{err}
	byPool := map[string][]*unstructured.Unstructured{}
	for _, obj := range due {
		pool, _, _ := unstructured.NestedString(obj.Object, "spec", "configurationName")
		byPool[pool] = append(byPool[pool], obj)
	}
	deleted := 0
	for pool, due := range byPool {
		n, err := s.prunePool(ctx, pool, due, now)
		deleted += n
		errs = append(errs, err)
	}
	return deleted, errors.Join(errs...)
}

// prunePool marks pool's due Instances, looks at the pool's Presences
// again, and deletes those marked that none lists.
func (s *Store) prunePool(ctx context.Context, pool string, due []*unstructured.Unstructured, now time.Time) (int, error) {
	var errs []error
	var marks []*unstructured.Unstructured
	for _, obj := range due {
		m, err := s.mark(ctx, obj, now)
		errs = append(errs, err)
		if m != nil {
			marks = append(marks, m)
		}
	}
	if len(marks) == 0 {
		return 0, errors.Join(errs...)
	}
	hook(s.test.pruneMarked, pool)
	listed, err := s.listedBy(ctx, pool)
	if err != nil {
		// The marks stay, harmless: the next pass marks again.
		return 0, errors.Join(append(errs, err)...)
	}
	hook(s.test.pruneListed, pool)
	deleted := 0
	for _, m := range marks {
		if listed[m.GetName()] {
			errs = append(errs, s.unmark(ctx, m))
			continue
		}
		ok, err := s.deleteMarked(ctx, m)
		if ok {
			deleted++
		}
		errs = append(errs, err)
	}
	return deleted, errors.Join(errs...)
}

// listedBy is the set of Instance names that the API server's Presences
// of pool list.
func (s *Store) listedBy(ctx context.Context, pool string) (map[string]bool, error) {
	list, err := s.presenceClient.List(ctx, metav1.ListOptions{LabelSelector: LabelPool + "=" + LabelValue(pool)})
	if err != nil {
		return nil, fmt.Errorf("listing the presences of pool %s: %w", pool, err)
	}
	seen := map[string]bool{}
	for _, obj := range list.Items {
		p, err := toPresence(&obj)
		if err != nil {
			return nil, err // unreadable: who sees what cannot be told
		}
		for _, d := range p.devices {
			seen[d] = true
		}
	}
	return seen, nil
}

// dueUnseen tracks, by UID, since when each Instance in this Store's view
// is unseen (no Presence lists it, no node is recorded in it, no slot is
// held), and returns those unseen for grace and created at least grace
// before now.
func (s *Store) dueUnseen(grace time.Duration, now time.Time) ([]*unstructured.Unstructured, error) {
	objs, seers := s.objects(), s.seers()
	var errs []error
	var due []*unstructured.Unstructured
	s.mu.Lock()
	defer s.mu.Unlock()
	unseen := map[types.UID]bool{}
	for _, obj := range objs {
		in, err := toInstance(obj)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(in.Nodes) > 0 || len(seers[in.Name]) > 0 || in.Held() {
			continue
		}
		uid := obj.GetUID()
		unseen[uid] = true
		since, ok := s.unseenSince[uid]
		if !ok {
			since = now
			s.unseenSince[uid] = now
		}
		if now.Sub(since) >= grace && now.Sub(obj.GetCreationTimestamp().Time) >= grace {
			due = append(due, obj)
		}
	}
	for uid := range s.unseenSince {
		if !unseen[uid] {
			delete(s.unseenSince, uid)
		}
	}
	return due, errors.Join(errs...)
}

// mark reads the API server's copy of due's Instance and, if it is the
// same object, no node is recorded in it and no slot is held, marks it
// (AnnotationUnseen) with a write guarded by that copy's resourceVersion.
// It returns the marked object, nil when it did not mark.
func (s *Store) mark(ctx context.Context, due *unstructured.Unstructured, now time.Time) (*unstructured.Unstructured, error) {
	obj, err := s.fetch(ctx, due.GetName())
	if err != nil || obj == nil || obj.GetUID() != due.GetUID() {
		return nil, err
	}
	in, err := toInstance(obj)
	if err != nil || len(in.Nodes) > 0 || in.Held() {
		return nil, err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationUnseen] = now.UTC().Format(time.RFC3339)
	obj.SetAnnotations(annotations)
	return s.writeMark(ctx, obj)
}

// unmark takes the mark off an Instance a Presence turned out to list;
// if anyone wrote it since, the mark is gone already.
func (s *Store) unmark(ctx context.Context, obj *unstructured.Unstructured) error {
	obj = obj.DeepCopy()
	annotations := obj.GetAnnotations()
	delete(annotations, AnnotationUnseen)
	obj.SetAnnotations(annotations)
	_, err := s.writeMark(ctx, obj)
	return err
}

// writeMark writes obj, changed in its annotations only, guarded by its
// resourceVersion: nil, nil when it changed or went meanwhile.
func (s *Store) writeMark(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out, err := s.client.Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
	s.countIf(err)
	switch {
	case err == nil:
		s.remember(out.GetName(), out, "")
		return out, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil, nil // gone already, or changed: the next pass decides
	}
	return nil, fmt.Errorf("marking instance %s: %w", obj.GetName(), err)
}

// deleteMarked deletes the marked object, guarded by the mark's
// resourceVersion and its UID.
func (s *Store) deleteMarked(ctx context.Context, obj *unstructured.Unstructured) (bool, error) {
	name, rv, uid := obj.GetName(), obj.GetResourceVersion(), obj.GetUID()
	err := s.client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv, UID: &uid}})
	s.countIf(err)
	switch {
	case err == nil:
		s.remember(name, nil, rv)
		s.notify()
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil // gone already, or written since the mark: the next pass decides
	}
	return false, fmt.Errorf("deleting instance %s: %w", name, err)
}

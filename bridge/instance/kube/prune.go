package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/instance"
)

// PruneUnseen deletes the Instances that no node has seen, and whose
// slots are all free, since grace before now (as this Store has watched:
// the clock of an object starts at the first call that finds it unseen)
// and that were created at least grace before now. It asks the API
// server again before deleting: for the Presences of each pool with
// Instances due (one list per pool and pass), and for each Instance, so
// that a node that has just seen the device again keeps it; the deletion
// is guarded by the resourceVersion read.
// It returns how many it deleted.
//
// It is for the one bridge that clears departed nodes, with AllPools:
// a device unplugged and plugged again, a bridge restarting, a drop-in
// edited keep their Instances (and so their slots' names) through grace.
func (s *Store) PruneUnseen(ctx context.Context, grace time.Duration, now time.Time) (int, error) {
	due, err := s.dueUnseen(grace, now)
	errs := []error{err}
	byPool := map[string][]instance.Instance{}
	for _, in := range due {
		byPool[in.Config] = append(byPool[in.Config], in)
	}
	deleted := 0
	for pool, due := range byPool {
		// One list of the pool's Presences for all its due Instances.
		seen, err := s.listedBy(ctx, pool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hook(s.test.pruneListed, pool)
		for _, in := range due {
			ok, err := s.deleteIfUnseen(ctx, in, seen)
			if ok {
				deleted++
			}
			errs = append(errs, err)
		}
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
func (s *Store) dueUnseen(grace time.Duration, now time.Time) ([]instance.Instance, error) {
	objs, seers := s.objects(), s.seers()
	var errs []error
	var due []instance.Instance
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
			due = append(due, in)
		}
	}
	for uid := range s.unseenSince {
		if !unseen[uid] {
			delete(s.unseenSince, uid)
		}
	}
	return due, errors.Join(errs...)
}

// deleteIfUnseen deletes in if the API server agrees that no node sees
// it (listed: what its pool's Presences list) and no slot of it is held.
func (s *Store) deleteIfUnseen(ctx context.Context, in instance.Instance, listed map[string]bool) (bool, error) {
	if listed[in.Name] {
		return false, nil
	}
	fresh, err := s.read(ctx, in.Name, true)
	if err != nil || fresh == nil {
		return false, err
	}
	if len(fresh.Nodes) > 0 || fresh.Held() {
		return false, nil
	}
	err = s.client.Delete(ctx, in.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &fresh.Version}})
	s.countIf(err)
	switch {
	case err == nil:
		s.remember(in.Name, nil, fresh.Version)
		s.notify()
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil // gone already, or changed: the next pass decides
	}
	return false, fmt.Errorf("deleting instance %s: %w", in.Name, err)
}

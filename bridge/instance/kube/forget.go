package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cdiexec/cdi/bridge/instance"
)

// ForgetNode records that node has left the cluster: its Presences are
// deleted, and every Instance where it holds a slot (or that a bridge of
// an older release recorded it in) is written once
// (instance.Instance.ForgetNodeClaims): its claims at either level are
// freed and it no longer sees any device. An Instance left unseen goes
// by PruneUnseen. It returns how many slots it freed; run again, it frees
// none and writes nothing.
//
// It is for the one bridge that clears departed nodes (bridge/departed),
// never for a live node: its containers' slots would be handed out again.
func (s *Store) ForgetNode(ctx context.Context, node string) (int, error) {
	all, err := s.List(ctx)
	errs := []error{err, s.deletePresences(ctx, node)}
	freed := 0
	for _, in := range all {
		if !slices.Contains(in.NodeNames(), node) {
			continue
		}
		// n is set by the attempt whose write went through: an attempt
		// that conflicted runs fn again on the newer object.
		n := 0
		err := s.modify(ctx, in.Name, update, func(in *instance.Instance) (bool, error) {
			var changed bool
			n, changed = in.ForgetNodeClaims(node)
			if changed {
				hook(s.test.forgetWrite, in.Name)
			}
			return changed, nil
		})
		switch {
		case err == nil:
			freed += n
		case errors.Is(err, instance.ErrNoSlot):
			// Deleted meanwhile: nothing of node's is left in it.
		default:
			errs = append(errs, err)
		}
	}
	return freed, errors.Join(errs...)
}

// deletePresences deletes node's Presences, found from the API server by
// their node label.
func (s *Store) deletePresences(ctx context.Context, node string) error {
	list, err := s.presenceClient.List(ctx, metav1.ListOptions{LabelSelector: LabelNode + "=" + LabelValue(node)})
	if err != nil {
		return fmt.Errorf("listing the presences of node %s: %w", node, err)
	}
	hook(s.test.forgetPresences, node)
	var errs []error
	for _, obj := range list.Items {
		p, err := toPresence(&obj)
		if err != nil || p.node != node {
			continue // another node's whose name hashes alike, or not ours to read
		}
		rv := obj.GetResourceVersion()
		err = s.presenceClient.Delete(ctx, obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		s.countIf(err)
		switch {
		case err == nil:
			s.forgetPresence(obj.GetName(), p.rv)
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("deleting presence %s: %w", obj.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cdiexec/cdi/bridge/instance"
)

// ErrNotDeparted is wrapped by ForgetNode's error when it stopped because
// the node is back: its Node object exists, or its bridge rewrote one of
// its Presences since ForgetNode listed them.
var ErrNotDeparted = errors.New("the node is not departed")

// nodes is the Nodes' resource.
var nodes = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

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
// A node can come back while it runs (a kubelet registers its Node again
// and claims, or its bridge writes its Presence again), so it asks the
// API server for the Node before it begins and before each write of an
// Instance (whose claims it frees from the copy that write is guarded
// by), and it stops, with ErrNotDeparted, at a Node that exists or a
// Presence deletion that conflicts.
func (s *Store) ForgetNode(ctx context.Context, node string) (int, error) {
	if err := s.nodeGone(ctx, node); err != nil {
		return 0, err
	}
	all, err := s.List(ctx)
	if err := s.deletePresences(ctx, node); err != nil {
		return 0, err
	}
	errs := []error{err}
	freed := 0
	for _, in := range all {
		if !slices.Contains(in.NodeNames(), node) {
			continue
		}
		n, err := s.forgetIn(ctx, in.Name, node)
		switch {
		case err == nil:
			freed += n
		case errors.Is(err, ErrNotDeparted):
			return freed, err
		case !errors.Is(err, instance.ErrNoSlot):
			// ErrNoSlot: deleted meanwhile, nothing of node's is left.
			errs = append(errs, err)
		}
	}
	return freed, errors.Join(errs...)
}

// forgetIn frees node's claims in the named Instance and forgets that it
// sees it; it returns how many slots it freed.
func (s *Store) forgetIn(ctx context.Context, name, node string) (int, error) {
	// n is set by the attempt whose write went through: an attempt that
	// conflicted runs fn again on the newer object.
	n := 0
	err := s.modify(ctx, name, update, func(in *instance.Instance) (bool, error) {
		var changed bool
		n, changed = in.ForgetNodeClaims(node)
		if !changed {
			return false, nil
		}
		if err := s.nodeGone(ctx, node); err != nil {
			return false, err
		}
		hook(s.test.forgetWrite, in.Name)
		return true, nil
	})
	return n, err
}

// nodeGone asks the API server for node's Node object: nil when there is
// none, an error wrapping ErrNotDeparted when there is.
func (s *Store) nodeGone(ctx context.Context, node string) error {
	_, err := s.dynamic.Resource(nodes).Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err == nil:
		return fmt.Errorf("node %s: %w: its Node object exists", node, ErrNotDeparted)
	}
	return fmt.Errorf("looking up node %s: %w", node, err)
}

// deletePresences deletes node's Presences, found from the API server by
// their node label, each guarded by the resourceVersion listed: one
// rewritten since is a live bridge's (ErrNotDeparted).
func (s *Store) deletePresences(ctx context.Context, node string) error {
	list, err := s.presenceClient.List(ctx, metav1.ListOptions{LabelSelector: LabelNode + "=" + LabelValue(node)})
	if err != nil {
		return fmt.Errorf("listing the presences of node %s: %w", node, err)
	}
	hook(s.test.forgetPresences, node)
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
		case apierrors.IsConflict(err):
			return fmt.Errorf("node %s: %w: its presence %s was written again", node, ErrNotDeparted, obj.GetName())
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("deleting presence %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

package kube

import (
	"context"
	"errors"
	"slices"

	"github.com/cdiexec/cdi/bridge/instance"
)

// ForgetNode records that node has left the cluster, in every Instance
// that names it (instance.Instance.ForgetNodeClaims): its claims at
// either level are freed and it no longer sees any device; an Instance
// left unused is deleted. Each Instance is one guarded write, as every
// change is. It returns how many slots it freed; run again, it frees
// none.
//
// It is for the one bridge that clears departed nodes (bridge/departed),
// never for a live node: its containers' slots would be handed out again.
func (s *Store) ForgetNode(ctx context.Context, node string) (int, error) {
	all, err := s.List(ctx)
	errs := []error{err}
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

package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// The first slices of a fresh node. resourceslice.StartController takes a
// second whatever it waits for (NodeSlices), and on a node with no slice
// of the driver (a new node, or after a reboot: the kubelet deleted them)
// nothing needs the controller before the first slices are written. So
// there they are written with the typed client, as the controller would
// write them (firstSlice), and the controller is started afterwards: its
// informer's initial state, read after the creates returned, holds every
// slice written, and its start returns only once that state is in its
// store, before its worker first syncs. That read is consistent when
// client-go streams it (watch-list: its WatchListClient default since
// 1.35, with a real clientset and a server that serves it); if client-go
// falls back to a LIST it asks with resourceVersion "0", which the API
// server may answer from a watch cache that has not yet seen the creates. The worker matches the
// node's slices of a pool by the index their name begins with (and
// generation): where they hold what it would write, it writes nothing.
// Where the node has slices (a restarted bridge: the kubelet keeps them)
// the controller starts at once and updates them, as before.

// undoTimeout bounds the deletes of a failed writeFirst, made also when
// the bridge is stopping.
const undoTimeout = 10 * time.Second

// freshNode tells whether the API server holds no slice of the driver on
// this node (one LIST), and the Node's UID, the slices' owner. Any error
// is taken as "not fresh": the controller then starts at once.
func (s *NodeSlices) freshNode(ctx context.Context) (types.UID, bool) {
	l, err := s.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: s.fieldSelector()})
	if err != nil {
		s.onError(ctx, err, "listing the node's ResourceSlices")
		return "", false
	}
	if len(l.Items) > 0 {
		return "", false
	}
	n, err := s.client.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
	if err != nil {
		s.onError(ctx, err, "reading the node, owner of its ResourceSlices")
		return "", false
	}
	return n.UID, true
}

// writeFirst creates the slices of the newest Publish. On any error it
// deletes those it created (the controller then writes them all), with a
// context of its own: a bridge stopped half-way leaves none.
func (s *NodeSlices) writeFirst(ctx context.Context, owner types.UID) {
	s.mu.Lock()
	res := s.pending
	s.mu.Unlock()
	api := s.client.ResourceV1().ResourceSlices()
	var created []string
	for _, name := range sortedPools(res) {
		pool := res.Pools[name]
		for i := range pool.Slices {
			if s.beforeCreate != nil {
				s.beforeCreate(len(created))
			}
			got, err := api.Create(ctx, firstSlice(s.driver, s.node, owner, name, pool, i), metav1.CreateOptions{})
			if err != nil {
				s.onError(ctx, fmt.Errorf("creating the first ResourceSlices (%d created, deleted again): %w", len(created), err), "writing the first slices")
				s.undo(ctx, created)
				return
			}
			created = append(created, got.Name)
		}
	}
	s.written = len(created)
}

// undo deletes the node's slices of the driver, all written here (the
// node had none and the controller has not started): those created and
// one whose create's answer was lost (a stop while it was read). If
// they cannot be listed, those created.
func (s *NodeSlices) undo(ctx context.Context, created []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	api := s.client.ResourceV1().ResourceSlices()
	names := created
	if l, err := api.List(ctx, metav1.ListOptions{FieldSelector: s.fieldSelector()}); err == nil {
		names = names[:0:0]
		for _, sl := range l.Items {
			names = append(names, sl.Name)
		}
	}
	for _, name := range names {
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.onError(ctx, fmt.Errorf("deleting the first ResourceSlice %s: %w", name, err), "undoing the first slices")
		}
	}
}

// fieldSelector selects the node's slices of the driver.
func (s *NodeSlices) fieldSelector() string {
	return fields.Set{resourceapi.ResourceSliceSelectorDriver: s.driver, resourceapi.ResourceSliceSelectorNodeName: s.node}.String()
}

// firstSlice is slice i of pool as resourceslice's controller (v0.37.2,
// syncPool) creates it on a node with none: the name's prefix the index
// in hex, padded to its length for the pool's count (at least 5), then
// the driver and the node; the Node the controlling owner; generation
// the pool's, at least 1.
func firstSlice(driver, node string, owner types.UID, name string, pool resourceslice.Pool, i int) *resourceapi.ResourceSlice {
	width := max(5, len(fmt.Sprintf("%x", len(pool.Slices)-1)))
	sl := pool.Slices[i]
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: strings.Join([]string{fmt.Sprintf("%0*x", width, i), driver, node, ""}, "-"),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: owner,
				Controller: ptr.To(true)}},
		},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver,
			Pool: resourceapi.ResourcePool{Name: name, Generation: max(pool.Generation, 1),
				ResourceSliceCount: int64(len(pool.Slices))},
			NodeName:               ptr.To(node),
			NodeSelector:           pool.NodeSelector,
			AllNodes:               refIfTrue(pool.AllNodes),
			Devices:                sl.Devices,
			SharedCounters:         sl.SharedCounters,
			PerDeviceNodeSelection: sl.PerDeviceNodeSelection,
			PartitionTypeAttribute: sl.PartitionTypeAttribute,
			SkipNodeOperations:     sl.SkipNodeOperations,
		},
	}
}

// sortedPools is res's pool names in order.
func sortedPools(res *resourceslice.DriverResources) []string {
	var names []string
	for name := range res.Pools {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// refIfTrue is a pointer to b if it is set, else nil, as the controller
// writes AllNodes.
func refIfTrue(b bool) *bool {
	if b {
		return &b
	}
	return nil
}

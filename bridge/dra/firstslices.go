package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// The first slices of a fresh node. resourceslice.StartController takes a
// second whatever it waits for (NodeSlices), and on a node with no slice
// of the driver (a new node, or after a reboot: the kubelet deleted them)
// nothing needs the controller before the first slices are written. So
// there they are written with the typed client, as the controller would
// write them (firstSlice), and the controller is started afterwards. Its
// worker matches the node's slices of a pool by the index their name
// begins with (and generation): where they hold what it would write, it
// writes nothing. That holds only if its informer's store holds every
// slice written when the worker first syncs, or it writes a second set.
// It does: its start returns once the informer's initial state is in
// its store, and that state is read after the creates returned, at the
// newest resourceVersion. client-go reads it either as a watch-list
// stream (its WatchListClient default since 1.35), which starts at the
// newest resourceVersion, or, where that is off or not served, as a LIST
// with resourceVersion "0", which the API server may answer from a watch
// cache that has not yet seen the creates: the controller's client asks
// those LISTs at the newest state instead (consistentLists).
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
// deletes those it made (the controller then writes them all), with a
// context of its own: a bridge stopped half-way leaves none of its own.
func (s *NodeSlices) writeFirst(ctx context.Context, owner types.UID) {
	s.mu.Lock()
	res := s.pending
	s.mu.Unlock()
	api := s.client.ResourceV1().ResourceSlices()
	var made []madeSlice
	for _, name := range slices.Sorted(maps.Keys(res.Pools)) {
		pool := res.Pools[name]
		for i := range pool.Slices {
			if s.beforeCreate != nil {
				s.beforeCreate(len(made))
			}
			sl := firstSlice(s.driver, s.node, owner, name, pool, i)
			got, err := api.Create(ctx, sl, metav1.CreateOptions{})
			if err != nil {
				s.onError(ctx, fmt.Errorf("creating the first ResourceSlices (%d created, deleted again): %w", len(made), err), "writing the first slices")
				if !apierrors.IsAlreadyExists(err) {
					// Its answer may be lost: made, or not.
					made = append(made, madeSlice{name: sl.Name})
				}
				s.undo(ctx, made)
				return
			}
			made = append(made, madeSlice{name: got.Name, uid: got.UID})
		}
	}
	s.written = len(made)
}

// madeSlice is a slice writeFirst created, or whose create's answer was
// lost (uid empty).
type madeSlice struct {
	name string
	uid  types.UID
}

// undo deletes the slices writeFirst made, by name, and by UID where it
// is known: never another's slice of the node (the other bridge of a
// rolling update may have written some meanwhile). The names are chosen
// here (firstSlice), so that one whose create's answer was lost is known
// as exactly as those created.
func (s *NodeSlices) undo(ctx context.Context, made []madeSlice) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	api := s.client.ResourceV1().ResourceSlices()
	for _, m := range made {
		var opts metav1.DeleteOptions
		if m.uid != "" {
			opts.Preconditions = metav1.NewUIDPreconditions(string(m.uid))
		}
		if err := api.Delete(ctx, m.name, opts); err != nil && !apierrors.IsNotFound(err) {
			s.onError(ctx, fmt.Errorf("deleting the first ResourceSlice %s: %w", m.name, err), "undoing the first slices")
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
// the pool's, at least 1. The controller asks the API server to
// generate the name from that prefix; here it is generated the API
// server's way (generatedName), so that undo knows it even when the
// create's answer is lost.
func firstSlice(driver, node string, owner types.UID, name string, pool resourceslice.Pool, i int) *resourceapi.ResourceSlice {
	width := max(5, len(fmt.Sprintf("%x", len(pool.Slices)-1)))
	sl := pool.Slices[i]
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: generatedName(strings.Join([]string{fmt.Sprintf("%0*x", width, i), driver, node, ""}, "-")),
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

// generatedName is a name generated from prefix as the API server
// generates one (k8s.io/apiserver's SimpleNameGenerator): the prefix cut
// to 58 characters, then five random ones.
func generatedName(prefix string) string {
	const maxPrefix = 63 - 5
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	return prefix + utilrand.String(5)
}

// refIfTrue is a pointer to b if it is set, else nil, as the controller
// writes AllNodes.
func refIfTrue(b bool) *bool {
	if b {
		return &b
	}
	return nil
}

// consistentLists is a client whose ResourceSlice LISTs are read at the
// newest resourceVersion: a LIST asking "0" (any state, a reflector's
// first) asks "" (the newest) instead. Everything else is the client's.
type consistentLists struct{ kubernetes.Interface }

func (c consistentLists) ResourceV1() resourcev1.ResourceV1Interface {
	return consistentV1{c.Interface.ResourceV1()}
}

// IsWatchListSemanticsUnSupported is the client's answer: a fake client
// serves no watch-list.
func (c consistentLists) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.Interface)
}

type consistentV1 struct{ resourcev1.ResourceV1Interface }

func (c consistentV1) ResourceSlices() resourcev1.ResourceSliceInterface {
	return consistentSlices{c.ResourceV1Interface.ResourceSlices()}
}

type consistentSlices struct {
	resourcev1.ResourceSliceInterface
}

func (c consistentSlices) List(ctx context.Context, opts metav1.ListOptions) (*resourceapi.ResourceSliceList, error) {
	if opts.ResourceVersion == "0" {
		opts.ResourceVersion = ""
	}
	return c.ResourceSliceInterface.List(ctx, opts)
}

package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/cdiexec/cdi/bridge/instance"
)

// The Presence custom resource (bridge/deploy/crd/presences.yaml): the
// devices one node sees of one pool, by Instance name. Who sees a device
// is recorded there, not in the device's Instance, so that a shared
// Instance does not grow with the nodes and a node joining writes one
// object per pool, not one per device.
const PresenceKind = "Presence"

// PresenceResource is the Presences' group, version and resource.
var PresenceResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "presences"}

// LabelNode labels every Presence with its node (LabelValue of it), so
// that the departed-node sweep finds a node's Presences by selector.
const LabelNode = Group + "/node"

// MaxPresenceDevices is the most devices a Presence lists: its CRD's
// spec.devices maxItems. A pool of more could never be recorded, so the
// bridge refuses a --max-devices-per-drop-in above it with this store.
const MaxPresenceDevices = 5000

// presenceSpec is the custom resource's spec.
type presenceSpec struct {
	Node              string   `json:"node"`
	ConfigurationName string   `json:"configurationName"`
	Devices           []string `json:"devices,omitempty"`
}

// presenceStatus counts the devices, for `kubectl get` (a printer
// column's JSONPath cannot count a list).
type presenceStatus struct {
	Devices int `json:"devices"`
}

// LabelValue is v where it is a valid label value (at most 63
// characters), else "h-" and 32 hex digits of its SHA-256.
func LabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "h-" + hex.EncodeToString(sum[:16])
}

// PresenceName is "<pool>.<node>" where that is a valid object name, else
// "<pool>.h-<hash of node>", the pool shortened as needed.
func PresenceName(node, pool string) string {
	if name := pool + "." + node; len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(node))
	suffix := ".h-" + hex.EncodeToString(sum[:16])
	return pool[:min(len(pool), validation.DNS1123SubdomainMaxLength-len(suffix))] + suffix
}

// presence is a Presence as this Store knows it.
type presence struct {
	node, pool string
	devices    []string // sorted
	version    string
	rv         uint64
}

func toPresence(obj *unstructured.Unstructured) (presence, error) {
	raw, _, err := unstructured.NestedMap(obj.Object, "spec")
	if err != nil {
		return presence{}, fmt.Errorf("presence %s: %w", obj.GetName(), err)
	}
	var s presenceSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s); err != nil {
		return presence{}, fmt.Errorf("presence %s: %w", obj.GetName(), err)
	}
	rv, _ := resourceVersion(obj)
	return presence{node: s.Node, pool: s.ConfigurationName, devices: slices.Sorted(slices.Values(s.Devices)),
		version: obj.GetResourceVersion(), rv: rv}, nil
}

func presenceObject(p presence, namespace string) (*unstructured.Unstructured, error) {
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&presenceSpec{Node: p.node, ConfigurationName: p.pool, Devices: p.devices})
	if err != nil {
		return nil, err
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&presenceStatus{Devices: len(p.devices)})
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec, "status": status}}
	obj.SetAPIVersion(Group + "/" + Version)
	obj.SetKind(PresenceKind)
	obj.SetName(PresenceName(p.node, p.pool))
	obj.SetNamespace(namespace)
	obj.SetLabels(map[string]string{LabelPool: LabelValue(p.pool), LabelNode: LabelValue(p.node)})
	obj.SetResourceVersion(p.version)
	return obj, nil
}

// knownPresence returns what this Store knows of node's Presence of
// pool: its own last write, or the presence informer's copy; else the
// API server's (ok false when there is none).
func (s *Store) knownPresence(ctx context.Context, node, pool string) (p presence, ok bool, err error) {
	name := PresenceName(node, pool)
	s.mu.Lock()
	p, ok = s.presences[name]
	s.mu.Unlock()
	if ok {
		return p, true, nil
	}
	return s.freshPresence(ctx, name)
}

func (s *Store) freshPresence(ctx context.Context, name string) (presence, bool, error) {
	obj, err := s.presenceClient.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return presence{}, false, nil
	}
	if err != nil {
		return presence{}, false, fmt.Errorf("reading presence %s: %w", name, err)
	}
	p, err := toPresence(obj)
	if err == nil {
		s.learnPresence(name, p)
	}
	return p, err == nil, err
}

// learnPresence records p as the Presence called name unless this Store
// knows a newer one.
func (s *Store) learnPresence(name string, p presence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, had := s.presences[name]; !had || old.rv <= p.rv || p.rv == 0 {
		s.presences[name] = p
	}
}

// forgetPresence drops the Presence called name, unless this Store
// knows a version of it newer than rv.
func (s *Store) forgetPresence(name string, rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, had := s.presences[name]; had && old.rv <= rv {
		delete(s.presences, name)
	}
}

// writePresence records that node sees exactly devices of pool (sorted
// Instance names): nil deletes the Presence. Nothing is written when the
// Presence already says so. It returns what the Presence listed before.
// A node's Presence is written by its bridge only (and deleted by the
// departed-node sweep), so a conflict means a copy this Store had not
// seen yet: it reads it again and retries.
func (s *Store) writePresence(ctx context.Context, node, pool string, devices []string) (before []string, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		before, err = s.tryPresence(ctx, node, pool, devices)
		s.countIf(err)
		switch {
		case errors.Is(err, errNoWrite):
			return nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
			s.mu.Lock()
			delete(s.presences, PresenceName(node, pool))
			s.mu.Unlock()
			return apierrors.NewConflict(PresenceResource.GroupResource(), PresenceName(node, pool), err)
		}
		return err
	})
	return before, err
}

// errNoWrite is tryPresence's answer when nothing needed writing.
var errNoWrite = errors.New("no write needed")

// tryPresence writes node's Presence of pool once, guarded by the
// version this Store knows, and returns what that version listed.
func (s *Store) tryPresence(ctx context.Context, node, pool string, devices []string) ([]string, error) {
	old, had, err := s.knownPresence(ctx, node, pool)
	switch {
	case err != nil:
		return nil, err
	case devices == nil && !had, had && devices != nil && slices.Equal(old.devices, devices):
		return old.devices, errNoWrite
	}
	name := PresenceName(node, pool)
	if devices == nil {
		err := s.presenceClient.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &old.version}})
		if err == nil {
			s.forgetPresence(name, old.rv)
		}
		return old.devices, err
	}
	obj, err := presenceObject(presence{node: node, pool: pool, devices: devices, version: old.version}, s.namespace)
	if err != nil {
		return nil, err
	}
	if had {
		obj, err = s.presenceClient.Update(ctx, obj, metav1.UpdateOptions{FieldManager: fieldManager})
	} else {
		obj, err = s.presenceClient.Create(ctx, obj, metav1.CreateOptions{FieldManager: fieldManager})
	}
	if err != nil {
		return old.devices, err
	}
	p, err := toPresence(obj)
	if err == nil {
		s.learnPresence(name, p)
	}
	return old.devices, err
}

// countIf counts an API write that was made (err nil) or refused by the
// server; errNoWrite and errors that never reached it are not writes.
func (s *Store) countIf(err error) {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		s.count(false)
	case errors.Is(err, errNoWrite):
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		s.count(true)
	case errors.As(err, &status):
		s.count(false)
	}
}

// seers maps each Instance name to the nodes whose Presence, as this
// Store knows them, lists it.
func (s *Store) seers() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for _, p := range s.presences {
		for _, d := range p.devices {
			out[d] = append(out[d], p.node)
		}
	}
	return out
}

// seersOf is the nodes whose Presences list device name: seers of one
// device, a binary search in each Presence's sorted devices, where
// seers maps every device of every Presence.
func (s *Store) seersOf(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, p := range s.presences {
		if _, ok := slices.BinarySearch(p.devices, name); ok {
			out = append(out, p.node)
		}
	}
	return out
}

// Nodes returns every node that an Instance this Store follows or a
// Presence it knows names, sorted: for the departed-node sweep, with
// AllPools, which knows every Presence, an empty one included.
func (s *Store) Nodes(ctx context.Context) ([]string, error) {
	all, err := s.List(ctx)
	var names []string
	for _, in := range all {
		names = append(names, in.NodeNames()...)
	}
	s.mu.Lock()
	for _, p := range s.presences {
		names = append(names, p.node)
	}
	s.mu.Unlock()
	slices.Sort(names)
	return slices.Compact(names), err
}

// withSeers adds to each Instance's Nodes (those an older bridge wrote
// into it) the nodes whose Presence lists it.
func withSeers(all []instance.Instance, seers map[string][]string) {
	for i := range all {
		in := &all[i]
		if extra := seers[in.Name]; len(extra) > 0 {
			in.Nodes = append(slices.Clone(in.Nodes), extra...)
			sort.Strings(in.Nodes)
			in.Nodes = slices.Compact(in.Nodes)
		}
	}
}

// followPresences starts the informer of every Presence, for a Store of
// AllPools: the one bridge that clears departed nodes, which must know
// who sees each device.
func (s *Store) followPresences(ctx context.Context) error {
	informer, err := s.presenceInformerOf("", func(presence) bool { return true }, s.notify)
	if err != nil {
		return err
	}
	s.presenceInformer = informer
	go informer.Run(ctx.Done())
	return nil
}

// presenceInformerOf is an informer, not started, of the Presences the
// label selector selects: it records each copy it brings that keep
// accepts (learnPresence) and each deletion (forgetPresence) in what the
// Store knows, then calls changed.
func (s *Store) presenceInformerOf(selector string, keep func(presence) bool, changed func()) (cache.SharedIndexInformer, error) {
	options := func(o *metav1.ListOptions) { o.LabelSelector = selector }
	informer := dynamicinformer.NewFilteredDynamicInformer(s.dynamic, PresenceResource, s.namespace, 0, cache.Indexers{}, options).Informer()
	if err := informer.SetTransform(dropManagedFields); err != nil {
		return nil, err
	}
	learn := func(obj any) {
		if o, ok := obj.(*unstructured.Unstructured); ok {
			if p, err := toPresence(o); err == nil && keep(p) {
				s.learnPresence(o.GetName(), p)
			}
		}
		changed()
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: learn, UpdateFunc: func(_, obj any) { learn(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(*unstructured.Unstructured); ok {
				rv, _ := resourceVersion(o)
				s.forgetPresence(o.GetName(), rv)
			}
			changed()
		},
	})
	return informer, err
}

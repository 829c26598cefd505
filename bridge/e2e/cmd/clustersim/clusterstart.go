package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// startupResult is the start-up phase: one node's first discovery of a
// pool of devices no Instance exists for, through a store with the
// bridge's client (kube.ClientQPS and ClientBurst), against a floor that
// writes the same objects with a client of no rate limit; then another
// node's, after the floor, so that a change of the machine's load shows.
type startupResult struct {
	devices                  int
	took, floor, again       time.Duration
	reqs, floorReqs          requestCounts
	writes, conflicts        int
	presenceBytes, instBytes int
}

// startupPool is the start-up phase's pool; its floor's is startupPool
// with "-floor".
const startupPool = "startup"

// startup has a new node observe o.startup local devices, all new, as
// its bridge's first discovery does, then writes the same Instances and
// Presence (renamed) one after another with an unlimited client.
func (s *sim) startup(ctx context.Context) error {
	if s.o.startup == 0 {
		return nil
	}
	r := startupResult{devices: s.o.startup}
	n, err := s.firstDiscovery(ctx, "node-startup", startupPool, &r)
	if err != nil {
		return err
	}
	if err := s.startupFloor(ctx, n, &r); err != nil {
		return err
	}
	again := startupResult{devices: s.o.startup}
	if _, err := s.firstDiscovery(ctx, "node-startup-2", startupPool+"-2", &again); err != nil {
		return err
	}
	r.again = again.took
	s.res.startup = r
	return nil
}

// firstDiscovery starts a store for node as cdi-bridge does, with the
// bridge's client rate limits, and has it observe o.startup new devices
// of pool, timing it and counting its requests into r; it returns node.
func (s *sim) firstDiscovery(ctx context.Context, node, pool string, r *startupResult) (string, error) {
	cfg := rest.CopyConfig(s.env.Config)
	cfg.QPS, cfg.Burst = kube.ClientQPS, kube.ClientBurst
	n, err := startSimNode(ctx, cfg, s.ns, node)
	if err != nil {
		return "", err
	}
	defer n.stop()
	seen := make([]instance.Instance, s.o.startup)
	for i := range seen {
		id := fmt.Sprintf("dev%05d", i)
		seen[i] = instance.Instance{Name: instance.Name(pool, id, n.name, false), Config: pool, DeviceID: id, Capacity: 1}
	}
	s.progress("startup: %s observing %d new devices (QPS %d, burst %d)", n.name, len(seen), kube.ClientQPS, kube.ClientBurst)
	before, stats := n.reqs.snapshot(), n.store.Stats()
	start := time.Now()
	if err := n.store.Observe(ctx, n.name, pool, seen); err != nil {
		return "", err
	}
	r.took = time.Since(start)
	r.reqs = n.reqs.snapshot().sub(before)
	after := n.store.Stats()
	r.writes, r.conflicts = after.Writes-stats.Writes, after.Conflicts-stats.Conflicts
	return n.name, nil
}

// startupFloor writes the objects the store wrote, renamed into another
// pool, with a client of no rate limit, one after another: one creation
// per Instance and one for the Presence, the least the API server is
// asked.
func (s *sim) startupFloor(ctx context.Context, node string, r *startupResult) error {
	objs, err := s.startupObjects(ctx, node)
	if err != nil {
		return err
	}
	r.presenceBytes, r.instBytes = objectBytes(objs[:1]), objectBytes(objs[1:])/max(len(objs)-1, 1)
	cfg := rest.CopyConfig(s.env.Config)
	cfg.QPS = -1 // no rate limiter
	reqs := &requests{}
	cfg.Wrap(reqs.wrap)
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s.progress("startup: the floor writing the same %d objects with no rate limit", len(objs))
	start := time.Now()
	for _, obj := range objs {
		resource := kube.Resource
		if obj.GetKind() == kube.PresenceKind {
			resource = kube.PresenceResource
		}
		if _, err := client.Resource(resource).Namespace(s.ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("the floor's %s: %w", obj.GetName(), err)
		}
	}
	r.floor = time.Since(start)
	r.floorReqs = reqs.snapshot()
	return nil
}

// startupObjects are the Presence and the Instances the start-up wrote,
// as new objects of pool startupPool-floor: the Presence first.
func (s *sim) startupObjects(ctx context.Context, node string) ([]*unstructured.Unstructured, error) {
	client, err := dynamic.NewForConfig(s.env.Config)
	if err != nil {
		return nil, err
	}
	presence, err := client.Resource(kube.PresenceResource).Namespace(s.ns).Get(ctx, kube.PresenceName(node, startupPool), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	list, err := client.Resource(kube.Resource).Namespace(s.ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + startupPool})
	if err != nil {
		return nil, err
	}
	out := []*unstructured.Unstructured{asFloor(presence)}
	for i := range list.Items {
		out = append(out, asFloor(&list.Items[i]))
	}
	return out, nil
}

// asFloor is obj as a new object of the floor's pool: renamed, relabelled,
// without what the API server sets.
func asFloor(obj *unstructured.Unstructured) *unstructured.Unstructured {
	out := obj.DeepCopy()
	out.SetName(out.GetName() + "-floor")
	out.SetResourceVersion("")
	out.SetUID("")
	out.SetCreationTimestamp(metav1.Time{})
	out.SetManagedFields(nil)
	out.SetGeneration(0)
	labels := out.GetLabels()
	labels[kube.LabelPool] = startupPool + "-floor"
	out.SetLabels(labels)
	return out
}

// objectBytes is the JSON size of objs.
func objectBytes(objs []*unstructured.Unstructured) int {
	n := 0
	for _, o := range objs {
		b, _ := o.MarshalJSON()
		n += len(b)
	}
	return n
}

// startupRows are the start-up phase's, when it ran.
func startupRows(row rowFunc, r startupResult) {
	if r.devices == 0 {
		return
	}
	row("startup", fmt.Sprintf("a node's first discovery of %d new devices: Observe, QPS %d burst %d / floor, no limit / another node's after it",
		r.devices, kube.ClientQPS, kube.ClientBurst), fmt.Sprintf("%s / %s / %s", secs(r.took), secs(r.floor), secs(r.again)),
		fmt.Sprintf("%.2f x floor; the rate limit alone: %s", r.took.Seconds()/max(r.floor.Seconds(), 1e-9),
			secs(time.Duration(float64(r.devices+1-kube.ClientBurst)/kube.ClientQPS*float64(time.Second)))), "-")
	row("startup", "requests GET / LIST / WATCH / writes: Observe / floor", fmt.Sprintf("%s / %s",
		requestCells(r.reqs, 1), requestCells(r.floorReqs, 1)), fmt.Sprintf("%d writes, %d conflicts", r.writes, r.conflicts),
		judge(r.writes == r.devices+1, fmt.Sprintf("%d writes for %d devices and a Presence", r.writes, r.devices)))
	row("startup", "the Presence / one Instance as JSON", fmt.Sprintf("%d / %d bytes", r.presenceBytes, r.instBytes), "", "-")
}

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cdiexec/cdi/bridge/dradevices"
)

// ClaimPod is a running pod whose devices came through DRA.
type ClaimPod struct {
	*Pod
	// Claim is the pod's claim: its template's, or the scheduler's for
	// an extended resource.
	Claim *resourceapi.ResourceClaim
	// RequestIDs are the ADDs' request-ids, <claim UID>-<n>, and IDs the
	// inventory ids of the allocated devices, both in the order of the
	// allocation's results.
	RequestIDs, IDs []string
}

// RunClaimPod runs a pod that the scheduler places, with the claim of
// template or the limits, waits until its container runs and has
// reported, and checks what the bridge and the plugin did for its claim
// of count devices (checkPrepared) and that the container sees exactly
// the device nodes and every variable their ADDs returned.
func (n *DRANode) RunClaimPod(t testing.TB, name, template string, limits map[string]int64, count int) *ClaimPod {
	t.Helper()
	n.CreatePod(t, n.ClaimPodSpec(t, name, template, limits))
	return n.AwaitClaimPod(t, name, count)
}

// ClaimPodSpec is RunClaimPod's pod, its report directory made.
func (n *DRANode) ClaimPodSpec(t testing.TB, name, template string, limits map[string]int64) *corev1.Pod {
	t.Helper()
	dir := n.Layout.Path("reports", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return newScheduledPod(name, dir, limits, template)
}

// CreatePod creates the pod in the pods' namespace.
func (n *DRANode) CreatePod(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	if _, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
}

// AwaitClaimPod is the rest of RunClaimPod, for a pod created already
// (ClaimPodSpec): it waits until the pod's container runs and checks it.
func (n *DRANode) AwaitClaimPod(t testing.TB, name string, count int) *ClaimPod {
	t.Helper()
	return n.awaitClaimPodWithin(t, name, count, podStartWait)
}

// awaitClaimPodWithin is AwaitClaimPod, bounded by within.
func (n *DRANode) awaitClaimPodWithin(t testing.TB, name string, count int, within time.Duration) *ClaimPod {
	t.Helper()
	ctx := t.Context()
	dir := n.Layout.Path("reports", name)
	running, err := waitRunningWithin(ctx, n.Cluster.Client, name, within)
	if err != nil {
		t.Fatal(err)
	}
	p := &ClaimPod{Pod: &Pod{Name: name}}
	p.ContainerID, p.StartedAt = containerState(running)
	if p.Report, err = readReport(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if p.Claim, err = n.podClaim(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := n.checkPrepared(ctx, p, count); err != nil {
		t.Fatalf("pod %s, claim %s (%s): %v", name, p.Claim.Name, p.Claim.UID, err)
	}
	n.checkReport(t, p.Pod)
	return p
}

// podClaim reads the pod's claim: named in its spec, or in its status by
// the claim controller (a template's) or, for an extended resource, by
// the scheduler.
func (n *DRANode) podClaim(ctx context.Context, pod *corev1.Pod) (*resourceapi.ResourceClaim, error) {
	var name string
	for _, c := range pod.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			name = *c.ResourceClaimName
		}
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	if e := pod.Status.ExtendedResourceClaimStatus; e != nil {
		name = e.ResourceClaimName
	}
	if name == "" {
		return nil, fmt.Errorf("pod %s runs, and its status names no claim: %+v", pod.Name, pod.Status)
	}
	return n.Cluster.Client.ResourceV1().ResourceClaims(PodNamespace).Get(ctx, name, metav1.GetOptions{})
}

// checkPrepared checks the pod's claim against the real components: the
// scheduler allocated count devices of the node's draPool, which its
// slices name; the plugin's LIST has, under each request-id
// <claim UID>-<n>, an ADD of exactly the n-th allocated device; the
// bridge's checkpoint records the claim with those request-ids and
// devices; and its CDI spec file names a device per request-id. It sets
// the pod's RequestIDs, IDs and Slots (one per request-id).
func (n *DRANode) checkPrepared(ctx context.Context, p *ClaimPod, count int) error {
	alloc := p.Claim.Status.Allocation
	if alloc == nil {
		return errors.New("the claim is not allocated")
	}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range alloc.Devices.Results {
		if r.Driver == domain {
			results = append(results, r)
		}
	}
	if len(results) != count {
		return fmt.Errorf("allocated %+v, want %d devices of driver %s", alloc.Devices.Results, count, domain)
	}
	nodeSlices, err := n.nodeSlices(ctx)
	if err != nil {
		return err
	}
	devices := poolDevices(nodeSlices)
	p.RequestIDs, p.IDs, p.Slots = nil, nil, nil
	for i, r := range results {
		id, ok := devices[r.Device]
		if r.Pool != Name+"/"+draPool || !ok {
			return fmt.Errorf("allocated device %s of pool %s, not one of %s/%s's devices %v", r.Device, r.Pool, Name, draPool, devices)
		}
		reqID := fmt.Sprintf("%s-%d", p.Claim.UID, i)
		p.RequestIDs, p.IDs = append(p.RequestIDs, reqID), append(p.IDs, id)
		p.Slots = append(p.Slots, Slot{ID: reqID, Instance: Instance{Name: r.Device, Pool: draPool, DeviceID: id}})
	}
	allocs, err := pluginAllocations(ctx, n.ConfDir, n.PluginDir)
	if err != nil {
		return err
	}
	for i, reqID := range p.RequestIDs {
		a, ok := allocs[reqID]
		if !ok {
			return fmt.Errorf("the plugin lists no ADD of request-id %s (it lists %v)", reqID, slices.Sorted(maps.Keys(allocs)))
		}
		// generic-tty's inventory id is the terminal's name under /dev.
		if want := []string{"/dev/" + p.IDs[i]}; !slices.Equal(a.Devices, want) {
			return fmt.Errorf("the plugin's ADD of %s gave devices %v; the claim's result %d is %s, whose ADD gives %v", reqID, a.Devices, i, p.IDs[i], want)
		}
	}
	if err := n.checkCheckpoint(p); err != nil {
		return err
	}
	return checkClaimSpec(p.Claim.UID, p.RequestIDs)
}

// checkCheckpoint checks that the bridge's checkpoint records the claim
// with the pod's request-ids and devices, each with its ADD's result.
func (n *DRANode) checkCheckpoint(p *ClaimPod) error {
	ckpt, err := dradevices.LoadCheckpoint(n.Checkpoint)
	if err != nil {
		return err
	}
	rec, ok := ckpt.Get(p.Claim.UID)
	if !ok {
		return fmt.Errorf("the checkpoint %s does not record the claim (it records %v)", n.Checkpoint, ckpt.UIDs())
	}
	var got []string
	for _, d := range rec.Devices {
		got = append(got, d.RequestID+"="+d.ID)
	}
	var want []string
	for i := range p.RequestIDs {
		want = append(want, p.RequestIDs[i]+"="+p.IDs[i])
	}
	if !slices.Equal(got, want) || !rec.Prepared() {
		return fmt.Errorf("the checkpoint records request-id=device %v (prepared: %v), want %v prepared", got, rec.Prepared(), want)
	}
	return nil
}

// claimSpecPath is the claim's CDI spec file, where containerd reads it.
func claimSpecPath(uid types.UID) string { return filepath.Join(cdiSpecDir, dradevices.SpecFile(uid)) }

// checkClaimSpec checks that the claim's CDI spec file is of kind
// <domain>/claim and names a device per request-id.
func checkClaimSpec(uid types.UID, requestIDs []string) error {
	data, err := os.ReadFile(claimSpecPath(uid))
	if err != nil {
		return fmt.Errorf("the claim's CDI spec: %w", err)
	}
	var s struct {
		Kind    string `json:"kind"`
		Devices []struct {
			Name string `json:"name"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("the claim's CDI spec: %w", err)
	}
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.Name)
	}
	if s.Kind != domain+"/"+dradevices.ClaimClass || !slices.Equal(names, requestIDs) {
		return fmt.Errorf("the claim's CDI spec is of kind %s with devices %v, want %s/%s with %v",
			s.Kind, names, domain, dradevices.ClaimClass, requestIDs)
	}
	return nil
}

// DeleteClaimPod deletes the pod and waits until its claim is unprepared
// (waitUnprepared).
func (n *DRANode) DeleteClaimPod(t testing.TB, p *ClaimPod) {
	t.Helper()
	deleted := time.Now()
	n.DeletePod(t, p.Name)
	if err := n.waitUnprepared(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s's claim %s unprepared %v after its deletion", p.Name, p.Claim.UID, time.Since(deleted).Round(time.Millisecond))
}

// waitUnprepared waits until the claim's CDI spec file is gone, the
// checkpoint forgets the claim and the plugin's LIST has none of its
// request-ids.
func (n *DRANode) waitUnprepared(ctx context.Context, p *ClaimPod) error {
	ctx, cancel := context.WithTimeout(ctx, podDeleteWait)
	defer cancel()
	var left []string
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		left = n.preparedLeft(ctx, p)
		if len(left) == 0 {
			return nil
		}
	}
	return fmt.Errorf("pod %s's claim %s not unprepared within %v of the pod's deletion: %s",
		p.Name, p.Claim.UID, podDeleteWait, strings.Join(left, "; "))
}

// preparedLeft says what is left of the claim's preparation.
func (n *DRANode) preparedLeft(ctx context.Context, p *ClaimPod) []string {
	var left []string
	if _, err := os.Stat(claimSpecPath(p.Claim.UID)); !errors.Is(err, fs.ErrNotExist) {
		left = append(left, fmt.Sprintf("its CDI spec %s is there (%v)", claimSpecPath(p.Claim.UID), err))
	}
	ckpt, err := dradevices.LoadCheckpoint(n.Checkpoint)
	if err != nil {
		left = append(left, err.Error())
	} else if _, ok := ckpt.Get(p.Claim.UID); ok {
		left = append(left, "the checkpoint records it")
	}
	allocs, err := pluginAllocations(ctx, n.ConfDir, n.PluginDir)
	if err != nil {
		return append(left, err.Error())
	}
	for _, id := range p.RequestIDs {
		if _, ok := allocs[id]; ok {
			left = append(left, "the plugin lists "+id)
		}
	}
	return left
}

// sliceEvent is one watch event of a ResourceSlice of the node.
type sliceEvent struct {
	Type      watch.EventType
	Name, UID string
	At        time.Time
}

func (e sliceEvent) String() string {
	return fmt.Sprintf("%s %s (uid %s) at %s", e.Type, e.Name, e.UID, e.At.Format("15:04:05.000"))
}

// sliceWatch records the watch events of the node's slices of the
// bridge's driver, from the list it starts from until Stop.
type sliceWatch struct {
	w    watch.Interface
	done chan struct{}
	mu   sync.Mutex
	seen []sliceEvent
}

// watchSlices lists the node's slices and watches them from that list on.
func (n *DRANode) watchSlices(ctx context.Context) (*sliceWatch, []resourceapi.ResourceSlice, error) {
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: Name, resourceapi.ResourceSliceSelectorDriver: domain}.String()
	api := n.Cluster.Client.ResourceV1().ResourceSlices()
	list, err := api.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, nil, err
	}
	w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, nil, err
	}
	sw := &sliceWatch{w: w, done: make(chan struct{})}
	go func() {
		defer close(sw.done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*resourceapi.ResourceSlice)
			if !ok {
				continue
			}
			sw.mu.Lock()
			sw.seen = append(sw.seen, sliceEvent{Type: ev.Type, Name: s.Name, UID: string(s.UID), At: time.Now()})
			sw.mu.Unlock()
		}
	}()
	return sw, list.Items, nil
}

// Events returns the events seen so far.
func (sw *sliceWatch) Events() []sliceEvent {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return slices.Clone(sw.seen)
}

// Stop ends the watch and returns its events, and whether it ran to
// Stop (a watch the API server ended early saw less).
func (sw *sliceWatch) Stop() ([]sliceEvent, bool) {
	select {
	case <-sw.done:
		sw.mu.Lock()
		defer sw.mu.Unlock()
		return sw.seen, false
	default:
	}
	sw.w.Stop()
	<-sw.done
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.seen, true
}

// sliceUIDs are the slices' UIDs, sorted.
func sliceUIDs(list []resourceapi.ResourceSlice) []string {
	out := make([]string, 0, len(list))
	for _, s := range list {
		out = append(out, string(s.UID))
	}
	slices.Sort(out)
	return out
}

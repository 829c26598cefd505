package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// Allocate levels, as the node reports them, and the claim alone.
const (
	levelInstance      = node.LevelInstance
	levelConfiguration = node.LevelConfiguration
	levelClaim         = "claim"
)

// How long no list may arrive before a rig's streams count as settled.
// A node sends to all its streams at once, within microseconds of the
// store's change signal. The kube store signals twice per write: at the
// write, and when its informer's watch brings the object back, which on
// this machine came within 10 ms of the write; 25 ms leaves a margin.
const (
	localQuiet = 5 * time.Millisecond
	kubeQuiet  = 25 * time.Millisecond
)

// sample is one timed Allocate.
type sample struct {
	// took is from the kubelet side's call to its response.
	took time.Duration
	// prop is from the response until the update reached the last of the
	// affected streams; negative when every update came before the
	// response (the claim is made before the ADD runs).
	prop time.Duration
	// writes are the store's API writes during the call.
	writes int
}

// request is what the kubelet asks for at a level: tty41's slot 0 at the
// Instance level, vdev 0 of the pool at the Configuration level.
func (r *rig) request(level string) (resource string, ids []string) {
	if level == levelInstance {
		return r.il, []string{r.slot}
	}
	return domain + "/" + ttyPool, []string{"0"}
}

// allocate times one Allocate and the updates it causes, then undoes it
// (untimed) and waits until the streams show everything free again, so
// that the next call starts from the same state.
func (r *rig) allocate(ctx context.Context, level string) (sample, error) {
	resource, ids := r.request(level)
	before, w0 := r.k.counts(), r.writeCount()
	start := time.Now()
	resp, err := r.k.allocate(ctx, resource, ids)
	took := time.Since(start)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", r.name, err)
	}
	s := sample{took: took, writes: r.writeCount() - w0}
	il, slot, err := grantedSlot(resp)
	if err != nil {
		return s, fmt.Errorf("%s %s: %w", r.name, level, err)
	}
	last, err := r.updates(level, il, slot, before)
	if err != nil {
		return s, fmt.Errorf("%s %s: %w", r.name, level, err)
	}
	s.prop = last.Sub(start.Add(took))
	after := r.k.counts()
	if err := r.undo.Once(ctx); err != nil {
		return s, fmt.Errorf("%s: undoing the Allocate: %w", r.name, err)
	}
	if il != r.il {
		// The vdev went to another terminal than tty41: wait on its stream.
		_, err = r.k.waitList(il, after[il], settle, allHealthy(1))
	}
	if err == nil {
		err = r.waitFree(after[domain+"/"+ttyPool], after[r.il])
	}
	if err == nil {
		// Streams whose content the claim did not change (tty41's, when
		// the vdev went elsewhere) may still have a list on its way: the
		// next call must not take it for its own update.
		err = r.k.quiet(r.quiet, settle)
	}
	if err != nil {
		return s, fmt.Errorf("%s: after the undo: %w", r.name, err)
	}
	return s, nil
}

// updates waits for the lists the Allocate of slot causes on the
// affected streams, the device's Instance-level one (il) and the pool's,
// and returns when the later arrived. With capacity 1, an Instance-level
// claim takes the device out of the pool's offer, and a pool claim marks
// the slot unhealthy on the Instance-level stream; a stream whose list
// does not change is sent nothing, and its zero time leaves the later
// of the two to the stream that changed.
func (r *rig) updates(level, il, slot string, before map[string]int) (time.Time, error) {
	ilOK := func(devs []*pluginapi.Device) bool { return health(devs, slot) == pluginapi.Unhealthy }
	poolOK := func(devs []*pluginapi.Device) bool { return len(devs) == ttyDevices }
	if level == levelInstance {
		ilOK = func(devs []*pluginapi.Device) bool { return health(devs, slot) == pluginapi.Healthy }
		poolOK = func(devs []*pluginapi.Device) bool { return len(devs) == ttyDevices-1 }
	}
	pool := domain + "/" + ttyPool
	a, err := r.k.waitList(il, before[il], settle, ilOK)
	if err != nil {
		return time.Time{}, err
	}
	b, err := r.k.waitList(pool, before[pool], settle, poolOK)
	if err != nil {
		return time.Time{}, err
	}
	return later(a.At, b.At), nil
}

// grantedSlot reads the slot from the response's slot annotation and
// returns it with its Instance-level resource.
func grantedSlot(resp *pluginapi.AllocateResponse) (resource, slot string, err error) {
	prefix := node.SlotAnnotation(domain, "")
	for _, c := range resp.ContainerResponses {
		for key := range c.Annotations {
			if s, ok := strings.CutPrefix(key, prefix); ok {
				i := strings.LastIndexByte(s, '-')
				if i < 0 {
					return "", "", fmt.Errorf("slot %q has no index", s)
				}
				return domain + "/" + s[:i], s, nil
			}
		}
	}
	return "", "", fmt.Errorf("no slot annotation in %v", resp)
}

// addAlone times the plugin's ADD of what the Instance-level Allocate
// asks for (same drop-in, request-id, device), then DELs it untimed.
func (r *rig) addAlone(ctx context.Context) (time.Duration, error) {
	req, err := spec.ParseRequest("tty:1")
	if err != nil {
		return 0, fmt.Errorf("ADD alone: %w", err)
	}
	start := time.Now()
	_, err = r.plugin.Add(ctx, invoke.AddRequest{Request: req, RequestID: r.slot, Devices: []string{ttyDevice}})
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("ADD alone: %w", err)
	}
	if err := r.plugin.Del(ctx, r.slot); err != nil {
		return 0, fmt.Errorf("DEL after ADD alone: %w", err)
	}
	return took, nil
}

// claimAlone times the store's claim of the Instance-level Allocate's
// slot, the part of the Allocate that writes the store; the release and
// the lists it causes are waited for untimed.
func (r *rig) claimAlone(ctx context.Context) (sample, error) {
	pool := domain + "/" + ttyPool
	c := []instance.Claim{{Instance: r.ilInstance, Slot: r.slot, Value: instance.InstanceLevelUsage(nodeName)}}
	before, w0 := r.k.counts(), r.writeCount()
	start := time.Now()
	err := r.store.Claim(ctx, c)
	s := sample{took: time.Since(start), writes: r.writeCount() - w0}
	if err != nil {
		return s, fmt.Errorf("%s: claim alone: %w", r.name, err)
	}
	// The node has seen the claim once the pool offers one device less.
	_, err = r.k.waitList(pool, before[pool], settle, func(d []*pluginapi.Device) bool { return len(d) == ttyDevices-1 })
	if err != nil {
		return s, fmt.Errorf("%s: claim alone: %w", r.name, err)
	}
	after := r.k.counts()
	if err := r.store.Release(ctx, c); err != nil {
		return s, fmt.Errorf("%s: release after the claim alone: %w", r.name, err)
	}
	if err := r.waitFree(after[pool], after[r.il]); err != nil {
		return s, fmt.Errorf("%s: after the claim alone: %w", r.name, err)
	}
	return s, r.k.quiet(r.quiet, settle)
}

func (r *rig) writeCount() int {
	if r.writes == nil {
		return 0
	}
	return r.writes()
}

func health(devs []*pluginapi.Device, id string) string {
	for _, d := range devs {
		if d.ID == id {
			return d.Health
		}
	}
	return ""
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

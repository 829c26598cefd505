package drafront

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"

	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/reclaim"
)

// rebuild runs dradevices.Preparer.Rebuild with the API server's claims
// and what the kubelet's containers hold, trying again with a backoff
// (up to rebuildBackoffCap) until both answered and every claim found
// here was prepared, or ctx ends (false). A claim that cannot be prepared
// (its device gone) is logged, not tried again for ever.
func (f *FrontEnd) rebuild(ctx context.Context) bool {
	backoff := kwait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: rebuildBackoffCap}
	for {
		t, err := f.truth(ctx)
		if err == nil {
			if err := f.preparer.Rebuild(ctx, t); err != nil {
				f.log.Error("rebuilding the prepared claims: some are not prepared; the kubelet prepares them again", "error", err)
			}
			f.log.Info("prepared claims rebuilt from the API server and the plugins", "prepared", len(f.preparer.Checkpoint.UIDs()),
				"kubeletAsked", t.Pods != nil)
			return true
		}
		delay := backoff.Step()
		f.log.Error("cannot rebuild the prepared claims yet; the DRA driver registers once they are", "error", err, "retryIn", delay)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

// rebuildBackoffCap bounds the wait between two tries of rebuild.
const rebuildBackoffCap = 30 * time.Second

// truth is every claim of the API server and what the kubelet's
// containers hold (none without Config.Kubelet).
func (f *FrontEnd) truth(ctx context.Context) (dradevices.Truth, error) {
	claims, err := f.listClaims(ctx)
	if err != nil {
		return dradevices.Truth{}, err
	}
	t := dradevices.Truth{Claims: claims}
	if f.cfg.Kubelet != nil {
		if t.Pods, err = reclaim.ListPods(ctx, f.cfg.Kubelet, f.driver); err != nil {
			return dradevices.Truth{}, err
		}
	}
	return t, nil
}

// listClaims lists every ResourceClaim, a page at a time: which claims
// were allocated with a device of this node, no selector says. Read only
// at start, from the API server's cache.
func (f *FrontEnd) listClaims(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
	var out []resourceapi.ResourceClaim
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := f.client.ResourceV1().ResourceClaims("").List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		out = append(out, l.Items...)
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
}

// sweep runs dradevices.Preparer.Sweep with what the kubelet's containers
// hold, and says whether what the device plugins' allocations hold
// changed, for a publish.
func (f *FrontEnd) sweep(ctx context.Context) bool {
	if f.cfg.Kubelet == nil {
		return false
	}
	pods, err := reclaim.ListPods(ctx, f.cfg.Kubelet, f.driver)
	if err != nil {
		f.log.Warn("asking the kubelet what its containers hold; the device plugins' allocations of DRA pools stay", "error", err)
		return false
	}
	before := f.preparer.Withheld()
	if err := f.preparer.Sweep(ctx, pods); err != nil {
		f.log.Error("releasing the device plugins' allocations of DRA pools", "error", err)
	}
	return !maps.EqualFunc(before, f.preparer.Withheld(), maps.Equal)
}

// warnSetAside tells the operator that the checkpoint was set aside: in
// the log, in a metric (Config.OnSetAside), and in a Warning Event
// regarding the Node (`kubectl describe node` shows it), in the default
// namespace, where the API server takes events of objects of no
// namespace.
func (f *FrontEnd) warnSetAside(ctx context.Context) {
	a := f.aside
	msg := fmt.Sprintf("DRA checkpoint %s set aside as %s (%s); the prepared claims are rebuilt from the API server and the plugins",
		f.cfg.Checkpoint, a.Path, a.Reason)
	if a.Err != nil {
		msg += ": " + a.Err.Error()
	}
	f.log.Warn(msg, "reason", a.Reason, "setAside", a.Path)
	if f.cfg.OnSetAside != nil {
		f.cfg.OnSetAside(a.Reason)
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: f.node + "-dra-checkpoint-", Namespace: metav1.NamespaceDefault},
		EventTime:  metav1.NowMicro(), Type: corev1.EventTypeWarning, Reason: "DRACheckpointSetAside", Action: "Rebuild",
		ReportingController: f.driver + "/cdi-bridge", ReportingInstance: "cdi-bridge-" + f.node, Note: truncate(msg, 1024),
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: f.node},
	}
	if _, err := f.client.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		f.log.Error("writing the Warning Event of the checkpoint set aside", "error", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

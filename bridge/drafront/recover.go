package drafront

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kwait "k8s.io/apimachinery/pkg/util/wait"

	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/reclaim"
)

// rebuild runs dradevices.Preparer.Rebuild with what the kubelet's
// containers hold and the API server's claims it names (truth), trying
// again with a backoff (up to rebuildBackoffCap) until both answered and
// every claim found here was prepared, or ctx ends (false). A claim that
// cannot be prepared (its device gone) is logged, not tried again for
// ever.
func (f *FrontEnd) rebuild(ctx context.Context) bool {
	backoff := kwait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: rebuildBackoffCap}
	for {
		var kubeletAsked bool
		var claimsRead int
		err := f.preparer.Rebuild(ctx, func(ctx context.Context, recorded []types.NamespacedName) (dradevices.Truth, error) {
			t, err := f.truth(ctx, recorded)
			kubeletAsked, claimsRead = t.Pods != nil, len(t.Claims)
			return t, err
		})
		if !errors.Is(err, dradevices.ErrNotRebuilt) {
			if err != nil {
				f.log.Error("rebuilding the prepared claims: some are not prepared; the kubelet prepares them again", "error", err)
			}
			f.log.Info("prepared claims rebuilt from the kubelet, the API server and the plugins", "prepared", len(f.preparer.Checkpoint.UIDs()),
				"kubeletAsked", kubeletAsked, "claimsRead", claimsRead)
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

// truthTimeout bounds truth with a pod UID, when the other bridge of a
// rolling update waits for it: Rebuild reads it under the library's
// lock of the calls, and the kubelet gives up a call after 45 s.
const truthTimeout = 30 * time.Second

// truth is what the kubelet's containers hold and the pods it runs (none
// without Config.Kubelet), and the API server's claims of those pods and
// those recorded (the checkpoint's), with which of them are in use here
// (nodeClaims): each pod and claim read by its name, never a list.
// Which claims the cluster has allocated with this node's devices no
// selector says, and the node needs only those of its own pods, a few,
// where a list of every claim grows with the cluster.
func (f *FrontEnd) truth(ctx context.Context, recorded []types.NamespacedName) (dradevices.Truth, error) {
	if f.cfg.PodUID != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, truthTimeout)
		defer cancel()
	}
	var t dradevices.Truth
	var also, running []string
	for _, n := range recorded {
		also = append(also, n.String())
	}
	if f.cfg.Kubelet != nil {
		pods, err := reclaim.ListPods(ctx, f.cfg.Kubelet, f.driver)
		if err != nil {
			return dradevices.Truth{}, err
		}
		t.Pods = pods
		running = slices.Collect(maps.Keys(pods.Running))
		also = append(also, slices.Collect(maps.Keys(pods.Claims))...)
	}
	var err error
	if t.Claims, t.InUse, err = f.nodeClaims().read(ctx, running, also); err != nil {
		return dradevices.Truth{}, err
	}
	return t, nil
}

// nodeClaims reads the claims in use on this node.
func (f *FrontEnd) nodeClaims() nodeClaims { return nodeClaims{client: f.client, node: f.node} }

// inUse is dradevices.ClaimsInUse with the kubelet's pods, for Sweep.
func (f *FrontEnd) inUse(pods *reclaim.Pods) dradevices.ClaimsInUse {
	return func(ctx context.Context) (map[types.UID]bool, error) {
		_, used, err := f.nodeClaims().read(ctx, slices.Collect(maps.Keys(pods.Running)), nil)
		return used, err
	}
}

// sweep runs dradevices.Preparer.Sweep with what the kubelet's containers
// hold (and the API server, for a claim the kubelet does not name), and
// says whether what the allocations no record names hold changed, for a
// publish.
func (f *FrontEnd) sweep(ctx context.Context) bool {
	if f.cfg.Kubelet == nil {
		return false
	}
	pods, err := reclaim.ListPods(ctx, f.cfg.Kubelet, f.driver)
	if err != nil {
		f.log.Warn("asking the kubelet what its containers hold; what the DRA pools' plugins hold stays", "error", err)
		return false
	}
	before := f.preparer.Withheld()
	if err := f.preparer.Sweep(ctx, pods, f.inUse(pods)); err != nil {
		f.log.Error("releasing what no pod of the kubelet's uses in the DRA pools", "error", err)
	}
	return !maps.EqualFunc(before, f.preparer.Withheld(), maps.Equal)
}

// aftermath is what follows a checkpoint set aside, for warnSetAside: the
// Event's action, and its note's end.
type aftermath struct{ action, then string }

// A checkpoint set aside at start, or read anew in a call (with a pod
// UID).
var (
	setAsideAtStart = aftermath{"Rebuild", "the prepared claims are rebuilt from the API server and the plugins"}
	setAsideInCall  = aftermath{"Rewrite", "the bridge writes anew the claims it knows of; an Unprepare of another finds it by the plugins' LIST"}
)

// warnSetAside tells the operator that the checkpoint was set aside, and
// then: in the log, in a metric (Config.OnSetAside), and in a Warning
// Event regarding the Node (`kubectl describe node` shows it), in the
// default namespace, where the API server takes events of objects of no
// namespace.
func (f *FrontEnd) warnSetAside(ctx context.Context, a dradevices.SetAside, after aftermath) {
	msg := fmt.Sprintf("DRA checkpoint %s set aside as %s (%s); %s", f.cfg.Checkpoint, a.Path, a.Reason, after.then)
	if a.Err != nil {
		msg += ": " + a.Err.Error()
	}
	f.log.Warn(msg, "reason", a.Reason, "setAside", a.Path)
	if f.cfg.OnSetAside != nil {
		f.cfg.OnSetAside(a.Reason)
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: f.node + "-dra-checkpoint-", Namespace: metav1.NamespaceDefault},
		EventTime:  metav1.NowMicro(), Type: corev1.EventTypeWarning, Reason: "DRACheckpointSetAside", Action: after.action,
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

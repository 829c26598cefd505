package broker

import (
	"context"
	"errors"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
)

// releaseOrphans lets go the FinalizerResult of the Jobs labelled with
// the Broker of key that are being deleted and whose Broker is gone, is
// being deleted, or is another now (deleted and made again under the
// name): the garbage collector deletes them (a foreground deletion of
// the Broker waits for them), and nothing else would let them go.
func (r *run) releaseOrphans(ctx context.Context, key string) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	uid := ""
	if u, err := r.brokerObject(key); err == nil && u != nil && u.GetDeletionTimestamp() == nil {
		uid = string(u.GetUID())
	}
	inf := r.workloads[ns]["Job"]
	if inf == nil {
		return
	}
	objs, _ := inf.GetIndexer().ByIndex(byBroker, name)
	for _, obj := range objs {
		j, ok := obj.(*batchv1.Job)
		if !ok || j.DeletionTimestamp == nil || ownerUID(j) == uid || !slices.Contains(j.Finalizers, FinalizerResult) {
			continue
		}
		var pl plan
		planner{}.release(&pl, j)
		for _, a := range pl.actions {
			if err := r.write(ctx, a); err != nil {
				r.log.Warn("letting go of the finalizer of a Job whose Broker is gone", "job", ns+"/"+j.Name, "error", err)
			}
		}
	}
}

// unreadable reports on the Broker of key that its object cannot be read
// as a Broker (cause: a field of the wrong type, which the CRD's schema
// let through): Accepted and Ready False, Invalid. It is not looked at
// again until it changes.
func (r *run) unreadable(ctx context.Context, key string, cause error) error {
	u, err := r.brokerObject(key)
	if err != nil || u == nil {
		return err
	}
	var s Status
	if st, ok := u.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(st, &s)
	}
	br := &Broker{Status: s}
	br.Generation = u.GetGeneration()
	next := refused(br, ReasonInvalid, "the Broker cannot be read: "+cause.Error())
	if err := r.writeStatus(ctx, withObject(br, u), next); err != nil {
		return errors.Join(cause, err)
	}
	r.log.Error("a Broker that cannot be read: told so in its status", "broker", key, "error", cause)
	r.event(u, corev1.EventTypeWarning, ReasonInvalid, "Read", cause.Error())
	return nil
}

// withObject is br with u's name, namespace and resourceVersion, for
// writeStatus.
func withObject(br *Broker, u *unstructured.Unstructured) *Broker {
	br.Name, br.Namespace, br.ResourceVersion = u.GetName(), u.GetNamespace(), u.GetResourceVersion()
	return br
}

// startEvents is the recorder of the Brokers' events, until ctx ends.
func (r *run) startEvents(ctx context.Context) events.EventRecorder {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: r.cfg.Client.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	return b.NewRecorder(scheme.Scheme, "cdi-bridge-brokers")
}

// tell records an Event on br for what its look met: a name taken, writes
// that failed. The recorder folds repeats into one Event with a count.
func (r *run) tell(br *Broker, pl plan, res applied) {
	u, err := r.brokerObject(brokerKey(br))
	if err != nil || u == nil {
		return
	}
	for _, p := range append(takenProblems(pl.problems), res.problems...) {
		r.event(u, corev1.EventTypeWarning, p.reason, "Create", p.msg)
	}
}

// event records an Event on u, a Broker object.
func (r *run) event(u *unstructured.Unstructured, typ, reason, action, note string) {
	if r.events != nil {
		r.events.Eventf(u, nil, typ, reason, action, "%s", note)
	}
}

// ownerUID is the UID of obj's controller, "" for none.
func ownerUID(obj metav1.Object) string {
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		return string(ref.UID)
	}
	return ""
}

package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// errInvalid is wrapped by validate's errors.
var errInvalid = errors.New("the Broker cannot be met")

// errWrites is wrapped by reconcile's error when writes failed: the
// Broker is looked at again with the queue's backoff.
var errWrites = errors.New("writes failed")

// reconcile brings br's workloads to what it wants and writes its
// status if that changed; it returns when to look again, zero for no
// reason to. Its error says the Broker is to be looked at again soon as
// well: a write failed (errWrites), or the devices could not be read.
func (r *run) reconcile(ctx context.Context, br *Broker) (time.Duration, error) {
	if br.DeletionTimestamp != nil {
		return 0, nil // its Jobs are let go (releaseOrphans); nothing new is made
	}
	if !r.served[br.Namespace] {
		msg := fmt.Sprintf("the bridge acts on Brokers in namespaces %s only (its --broker-namespaces, the chart's brokers.namespaces)",
			strings.Join(r.cfg.Namespaces, ", "))
		return 0, r.writeStatus(ctx, br, refused(br, ReasonNamespaceNotServed, msg))
	}
	if err := r.validate(br); err != nil {
		return 0, r.writeStatus(ctx, br, refused(br, ReasonInvalid, err.Error()))
	}
	byPool, err := r.devices(ctx)
	if err != nil {
		return 0, err
	}
	devices := byPool[br.Spec.Pool]
	p := planner{builder: builder{domain: r.cfg.Domain, dra: r.dra}, now: time.Now(), holder: r.names.holder, gone: r.gone}
	pl := p.plan(br, devices, r.owned(br))
	res := r.apply(ctx, br, pl)
	if ctx.Err() != nil {
		return 0, nil
	}
	r.names.watch(brokerKey(br), pl.nameFreed)
	lk := look{selected: len(selectedOf(br, devices)), poolServed: len(devices) > 0 || r.poolServed(br.Spec.Pool)}
	if r.dra[br.Spec.Pool] && !r.classExists(p.deviceClass(br)) {
		lk.noClass = p.deviceClass(br)
	}
	again := pl.again
	if again > 0 {
		// Counted from the look's start: a look of 10,000 devices takes
		// seconds, which a grace must not add to.
		again = max(again-time.Since(p.now), time.Millisecond)
	}
	if res.retrySoon {
		again = minPositive(again, retryFirst)
	}
	// The time to look again stands with an error too: a grace ends
	// when it says, however far the backoff of failed writes has grown.
	if err := r.writeStatus(ctx, br, r.status(br, lk, pl, res)); err != nil {
		return again, err
	}
	r.tell(br, pl, res)
	if len(res.problems) > 0 {
		return again, fmt.Errorf("%w: %d, the first: %s", errWrites, len(res.problems), res.problems[0].msg)
	}
	return again, nil
}

// validate refuses what the CRD's schema cannot: a Broker whose spec
// the controller cannot make workloads of.
func (r *run) validate(br *Broker) error {
	s := &br.Spec
	switch {
	case (s.Job == nil) == (s.Deployment == nil):
		return fmt.Errorf("%w: it must have a job or a deployment, and not both", errInvalid)
	case s.Job != nil && (s.Job.Selector != nil || ptr.Deref(s.Job.ManualSelector, false)):
		return fmt.Errorf("%w: its job has a selector: the controller labels the pods and the Job controller selects them", errInvalid)
	case s.strategy() == Pool && s.Selector != nil && !r.dra[s.Pool]:
		return fmt.Errorf("%w: a selector with the Pool strategy needs a pool served through DRA: pool %s is served by device plugins, "+
			"whose pool resource hands out any of its devices", errInvalid, s.Pool)
	case s.strategy() == Pool && s.Services != nil && s.Services.PerDevice != nil:
		return fmt.Errorf("%w: a Service per device needs the PerDevice strategy", errInvalid)
	}
	return nil
}

// applied is what apply met: the writes that failed, and whether the
// Broker should be looked at again soon (an object changed under a
// patch, the device of a delete came back).
type applied struct {
	problems  []problem
	retrySoon bool
	counts    map[op]int
}

// apply makes pl's writes, in order. A delete that stands on a device's
// absence first looks for the device once more (and the letting go of a
// Job's finalizer after it is made only if the delete was): a leader
// that decided on a view
// since changed (the device back, the lease lost to a leader that saw it
// back) deletes nothing. A create that fails leaves its unit Pending;
// every failure is a problem for the status.
func (r *run) apply(ctx context.Context, br *Broker, pl plan) applied {
	res := applied{counts: map[op]int{}}
	back := map[string]bool{}
	for _, a := range pl.actions {
		if ctx.Err() != nil {
			return res
		}
		if r.beforeWrite != nil {
			r.beforeWrite(a)
		}
		if a.gone != "" && (back[a.gone] || !a.follows && r.stillThere(ctx, br, a.gone)) {
			back[a.gone] = true
			res.retrySoon = true
			r.log.Info("not deleting: the device is back", "broker", brokerKey(br), "device", a.gone, "write", a.String())
			continue
		}
		r.applyOne(ctx, br, pl, a, &res)
	}
	if len(res.counts) > 0 {
		r.log.Info("brought a Broker's workloads up to date", "broker", brokerKey(br), "created", res.counts[create],
			"updated", res.counts[update], "patched", res.counts[patch], "deleted", res.counts[remove])
	}
	return res
}

// applyOne makes a and records what came of it in res.
func (r *run) applyOne(ctx context.Context, br *Broker, pl plan, a action, res *applied) {
	err := r.write(ctx, a)
	switch {
	case err == nil:
		res.counts[a.op]++
		r.log.Debug("wrote", "broker", brokerKey(br), "write", a.String())
	case a.op == remove && (apierrors.IsNotFound(err) || apierrors.IsConflict(err)):
		// gone already, or another object of the name now
	case a.op == patch && (apierrors.IsNotFound(err) || apierrors.IsConflict(err)),
		a.op == patch && apierrors.IsInvalid(err) && r.changedSince(ctx, a.obj):
		// Changed since it was seen (a test of the patch failed with
		// Invalid, as an admission policy's refusal does): the next look
		// sees how.
		res.retrySoon = true
	case a.op == create && apierrors.IsAlreadyExists(err):
		// Made by another leader since this one looked, or someone
		// else's: the names' informer will tell.
		res.retrySoon = true
		markPending(pl, a)
	default:
		res.problems = append(res.problems, problem{ReasonCreateFailed, fmt.Sprintf("%s: %v", a, err)})
		markPending(pl, a)
	}
}

// markPending counts the unit whose workload a failed create was to
// make as Pending: it has none.
func markPending(pl plan, a action) {
	if !a.workload {
		return
	}
	if key, ok := a.obj.GetLabels()[LabelDevice]; ok {
		pl.states[key] = Pending
	} else if _, ok := pl.states[""]; ok {
		pl.states[""] = Pending
	}
}

// stillThere looks at the Broker's pool once more, for a write that
// stands on gone being gone: a device's key, or poolGone for the Pool
// strategy's Count devices. It reads the device alone (an index), or
// the pool's devices for poolGone; a read that fails counts as there:
// nothing is deleted on a view that failed.
func (r *run) stillThere(ctx context.Context, br *Broker, gone string) bool {
	if gone != poolGone {
		return r.devicePresent(br.Spec.Pool, gone)
	}
	byPool, err := r.devices(ctx)
	return err != nil || poolMet(br, byPool[br.Spec.Pool])
}

// write makes one write and remembers it (recentWrites). A delete is of
// the object seen (its UID a precondition), with its dependents in the
// background: a Job's pods, a Deployment's ReplicaSets.
func (r *run) write(ctx context.Context, a action) error {
	kind := kindOf(a.obj)
	if a.op == remove {
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(a.obj.GetUID())},
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
		err := r.remove(ctx, a.obj, opts)
		if err == nil || apierrors.IsNotFound(err) {
			r.recent.removed(kind, a.obj)
		}
		return err
	}
	got, err := r.createOrUpdate(ctx, a)
	switch {
	case err != nil:
	case got.GetDeletionTimestamp() != nil && len(got.GetFinalizers()) == 0:
		// The write let its last finalizer go: the object is gone.
		r.recent.removed(kind, got)
	default:
		r.recent.wrote(kind, got)
	}
	return err
}

// patchObject makes a's patch with the typed client of the object's
// kind, and returns the object the API server answered.
func (r *run) patchObject(ctx context.Context, a action) (metav1.Object, error) {
	c, ns, name := r.cfg.Client, a.obj.GetNamespace(), a.obj.GetName()
	pt := types.MergePatchType
	if a.jsonPatch {
		pt = types.JSONPatchType
	}
	opts := metav1.PatchOptions{}
	switch a.obj.(type) {
	case *batchv1.Job:
		return c.BatchV1().Jobs(ns).Patch(ctx, name, pt, a.body, opts)
	case *appsv1.Deployment:
		return c.AppsV1().Deployments(ns).Patch(ctx, name, pt, a.body, opts)
	case *corev1.Service:
		return c.CoreV1().Services(ns).Patch(ctx, name, pt, a.body, opts)
	case *resourceapi.ResourceClaimTemplate:
		return c.ResourceV1().ResourceClaimTemplates(ns).Patch(ctx, name, pt, a.body, opts)
	}
	return nil, fmt.Errorf("patch of a %T", a.obj)
}

// createOrUpdate makes a create or an update with the typed client of
// the object's kind, and returns the object the API server answered.
func (r *run) createOrUpdate(ctx context.Context, a action) (metav1.Object, error) {
	if a.op == patch {
		return r.patchObject(ctx, a)
	}
	c, ns := r.cfg.Client, a.obj.GetNamespace()
	cr, up := metav1.CreateOptions{}, metav1.UpdateOptions{}
	switch o := a.obj.(type) {
	case *batchv1.Job:
		if a.op == create {
			return c.BatchV1().Jobs(ns).Create(ctx, o, cr)
		}
		return c.BatchV1().Jobs(ns).Update(ctx, o, up)
	case *appsv1.Deployment:
		if a.op == create {
			return c.AppsV1().Deployments(ns).Create(ctx, o, cr)
		}
		return c.AppsV1().Deployments(ns).Update(ctx, o, up)
	case *corev1.Service:
		if a.op == create {
			return c.CoreV1().Services(ns).Create(ctx, o, cr)
		}
		return c.CoreV1().Services(ns).Update(ctx, o, up)
	case *resourceapi.ResourceClaimTemplate:
		return c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, o, cr)
	}
	return nil, fmt.Errorf("%s of a %T", a.op, a.obj)
}

// changedSince says whether obj has changed since it was seen: another
// resourceVersion, another object of the name, or none. A read that
// fails (refused, no answer) says no: the write's failure is reported,
// and retried with backoff.
func (r *run) changedSince(ctx context.Context, obj metav1.Object) bool {
	c, ns, name, opts := r.cfg.Client, obj.GetNamespace(), obj.GetName(), metav1.GetOptions{}
	var now metav1.Object
	var err error
	switch obj.(type) {
	case *batchv1.Job:
		now, err = c.BatchV1().Jobs(ns).Get(ctx, name, opts)
	case *appsv1.Deployment:
		now, err = c.AppsV1().Deployments(ns).Get(ctx, name, opts)
	case *corev1.Service:
		now, err = c.CoreV1().Services(ns).Get(ctx, name, opts)
	case *resourceapi.ResourceClaimTemplate:
		now, err = c.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, name, opts)
	default:
		return true
	}
	if err != nil {
		return apierrors.IsNotFound(err)
	}
	return now.GetUID() != obj.GetUID() || now.GetResourceVersion() != obj.GetResourceVersion()
}

// remove deletes obj with the typed client of its kind.
func (r *run) remove(ctx context.Context, obj metav1.Object, opts metav1.DeleteOptions) error {
	c, ns, name := r.cfg.Client, obj.GetNamespace(), obj.GetName()
	switch obj.(type) {
	case *batchv1.Job:
		return c.BatchV1().Jobs(ns).Delete(ctx, name, opts)
	case *appsv1.Deployment:
		return c.AppsV1().Deployments(ns).Delete(ctx, name, opts)
	case *corev1.Service:
		return c.CoreV1().Services(ns).Delete(ctx, name, opts)
	case *resourceapi.ResourceClaimTemplate:
		return c.ResourceV1().ResourceClaimTemplates(ns).Delete(ctx, name, opts)
	}
	return fmt.Errorf("delete of a %T", obj)
}

func brokerKey(br *Broker) string { return br.Namespace + "/" + br.Name }

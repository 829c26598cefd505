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
	"k8s.io/utils/ptr"
)

// errInvalid is wrapped by validate's errors.
var errInvalid = errors.New("the Broker cannot be met")

// reconcile brings br's workloads to what it wants and writes its
// status if that changed; it returns when to look again, zero for no
// reason to.
func (r *run) reconcile(ctx context.Context, br *Broker) (time.Duration, error) {
	if !r.served[br.Namespace] {
		msg := fmt.Sprintf("the bridge acts on Brokers in namespaces %s only (its --broker-namespaces, the chart's brokers.namespaces)",
			strings.Join(r.cfg.Namespaces, ", "))
		return 0, r.writeStatus(ctx, br, r.refused(br, ReasonNamespaceNotServed, msg))
	}
	if err := r.validate(br); err != nil {
		return 0, r.writeStatus(ctx, br, r.refused(br, ReasonInvalid, err.Error()))
	}
	byPool, err := r.devices(ctx)
	if err != nil {
		return 0, err
	}
	devices := byPool[br.Spec.Pool]
	pl := planner{builder: builder{domain: r.cfg.Domain, dra: r.dra}, now: time.Now()}.plan(br, devices, r.owned(br))
	res := r.apply(ctx, br, pl)
	if ctx.Err() != nil {
		return 0, nil
	}
	again := pl.again
	if res.retrySoon {
		again = minPositive(again, nameTakenRetry)
	}
	return again, r.writeStatus(ctx, br, r.status(br, selectedCount(br, devices), pl.entries, res.problems))
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

// applied is what apply met: problems to report, by unit, and whether a
// name was taken (or the API server had an object the informer did not)
// so that the Broker should be looked at again soon.
type applied struct {
	problems  []string
	retrySoon bool
}

// apply makes pl's writes, in order. A delete that stands on a device's
// absence first looks for the device once more: a leader that decided
// on a view since changed (the device back, the lease lost to a leader
// that saw it back) deletes nothing. A create that fails leaves its
// unit without an entry; every failure is a problem for the status.
func (r *run) apply(ctx context.Context, br *Broker, pl plan) applied {
	var res applied
	counts := map[op]int{}
	for _, a := range pl.actions {
		if ctx.Err() != nil {
			return res
		}
		if r.beforeWrite != nil {
			r.beforeWrite(a)
		}
		if a.gone != "" && r.devicePresent(ctx, br.Spec.Pool, a.gone) {
			r.log.Info("not deleting: the device is back", "broker", brokerKey(br), "device", a.gone, "object", a.String())
			continue
		}
		err := r.write(ctx, a)
		switch {
		case err == nil:
			counts[a.op]++
			r.log.Debug("wrote", "broker", brokerKey(br), "write", a.String())
		case a.op == remove && (apierrors.IsNotFound(err) || apierrors.IsConflict(err)):
			// gone already, or another object of the name now
		case a.op == create && apierrors.IsAlreadyExists(err):
			res.retrySoon = true
			// Someone else's, or one another leader made since this one
			// looked: the next look, soon, tells which.
			res.problems = append(res.problems, fmt.Sprintf("%s %s: a %s of that name exists that the Broker does not own",
				ReasonNameTaken, a.obj.GetName(), kindOf(a.obj)))
			dropEntry(pl, a)
		default:
			res.problems = append(res.problems, fmt.Sprintf("%s: %v", a, err))
			dropEntry(pl, a)
		}
	}
	if len(counts) > 0 {
		r.log.Info("brought a Broker's workloads up to date", "broker", brokerKey(br),
			"created", counts[create], "updated", counts[update], "deleted", counts[remove])
	}
	return res
}

// dropEntry forgets the entry of the unit whose workload a failed create
// was to make: it has none.
func dropEntry(pl plan, a action) {
	if !a.workload {
		return
	}
	for key, e := range pl.entries {
		if e.Name == a.obj.GetName() {
			delete(pl.entries, key)
		}
	}
}

// devicePresent looks at the pool's devices once more; an error reading
// them counts as present: nothing is deleted on a view that failed.
func (r *run) devicePresent(ctx context.Context, pool, key string) bool {
	byPool, err := r.devices(ctx)
	if err != nil {
		return true
	}
	for _, d := range byPool[pool] {
		if d.Key == key {
			return true
		}
	}
	return false
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
	if err == nil {
		r.recent.wrote(kind, got)
	}
	return err
}

// createOrUpdate makes a create or an update with the typed client of
// the object's kind, and returns the object the API server answered.
func (r *run) createOrUpdate(ctx context.Context, a action) (metav1.Object, error) {
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

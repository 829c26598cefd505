package broker

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// DefaultDeletionGrace is how long a vanished device keeps its workloads
// when the Broker does not say: a device that flaps (a camera off the
// network for a few seconds, a bridge restarting) churns no Job.
const DefaultDeletionGrace = time.Minute

// owned are the objects of one Broker, by name: those that carry its
// label and its UID as their controller.
type owned struct {
	jobs        map[string]*batchv1.Job
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	templates   map[string]*resourceapi.ResourceClaimTemplate
}

// op is what an action does.
type op int

const (
	create op = iota
	update
	remove
	// patch applies a JSON patch (finalizers) or a merge patch
	// (annotations) to the object.
	patch
)

func (o op) String() string { return [...]string{"create", "update", "delete", "patch"}[o] }

// action is one write.
type action struct {
	op  op
	obj metav1.Object // with its UID for a delete, as a precondition
	// body and jsonPatch are a patch's: a JSON patch, or a merge patch.
	body      []byte
	jsonPatch bool
	// gone is the device key whose absence a delete stands on ("" for a
	// delete that stands on nothing; poolGone for the pool's workload,
	// which stands on the pool lacking Count devices): the devices are
	// looked at once more just before.
	gone string
	// workload: a create of the unit's workload, whose failure leaves
	// the unit Pending.
	workload bool
	// follows: the write completes the delete before it, of the same
	// gone, and is made only if that was (a Job's finalizer let go).
	follows bool
}

// poolGone is action.gone of the pool's workload's deletion.
const poolGone = "\x00pool"

func (a action) String() string {
	return fmt.Sprintf("%s %s %s/%s", a.op, kindOf(a.obj), a.obj.GetNamespace(), a.obj.GetName())
}

// plan is what one Broker wants done now: the writes, the state of each
// of its workloads (by device key: those it wants, and those of a
// vanished device in their grace), what stands in the way of some
// (problems), and when to look again (a vanished device's grace), zero
// for no reason to.
type plan struct {
	actions  []action
	states   map[string]State
	problems []problem
	again    time.Duration
	// nameFreed: a create waits for an object of the Broker's own to go
	// (a Job made anew is deleted first; its finalizer holds it a while).
	nameFreed bool
}

// problem is why a workload the Broker wants is not as it wants.
type problem struct {
	reason, msg string
}

// planner decides a Broker's writes from what is (the pool's devices
// and the Broker's objects) and what it wants.
type planner struct {
	builder
	now time.Time
	// gone remembers when a vanished device's workload was first found
	// so until its AnnotationGoneSince is written (nil: nothing is).
	gone *goneClock
	// holder is the metadata of the object of kind and name in ns, nil
	// for none (a nil holder: none is known).
	holder func(kind, ns, name string) metav1.Object
}

// plan is what br wants done, given devices, the pool's devices now, and
// its objects.
func (p planner) plan(br *Broker, devices []Device, have owned) plan {
	pl := plan{states: map[string]State{}}
	wanted := map[string]bool{}
	for _, u := range p.units(br, devices) {
		wanted[u.key()] = true
		pl.states[u.key()] = p.ensure(&pl, br, u, have)
	}
	p.ensurePoolService(&pl, br, have)
	present := map[string]bool{"": poolMet(br, devices)}
	for _, d := range devices {
		present[d.Key] = true
	}
	for _, key := range have.keys(br.Name) {
		if !wanted[key] {
			p.retire(&pl, br, key, present[key], have)
		}
	}
	return pl
}

// units are the workloads br wants of devices: one per selected device,
// or one for the pool while it has Count selected devices.
func (p planner) units(br *Broker, devices []Device) []unit {
	selected := selectedOf(br, devices)
	if br.Spec.strategy() == Pool {
		if len(selected) < br.Spec.count() {
			return nil
		}
		return []unit{{name: workloadName(br.Name, ""), devices: br.Spec.count()}}
	}
	units := make([]unit, len(selected))
	for i := range selected {
		units[i] = unit{name: workloadName(br.Name, selected[i].Key), device: &selected[i], devices: 1}
	}
	return units
}

// selectedOf is the devices br selects.
func selectedOf(br *Broker, devices []Device) []Device {
	var out []Device
	for _, d := range devices {
		if br.Spec.Selector.selects(d) {
			out = append(out, d)
		}
	}
	return out
}

// poolMet says whether the Pool strategy's br has its Count devices.
func poolMet(br *Broker, devices []Device) bool {
	return br.Spec.strategy() == Pool && len(selectedOf(br, devices)) >= br.Spec.count()
}

// ensure plans u's objects (its workload made, brought to the Broker's
// template, or left as it is; its Service and claim template likewise)
// and returns the workload's state.
func (p planner) ensure(pl *plan, br *Broker, u unit, have owned) State {
	// The claim template before the workload: the claim controller makes
	// a pod's claim from it, and fails the pod's until it exists.
	if p.dra[br.Spec.Pool] {
		p.ensureTemplate(pl, p.claimTemplate(br, u), have.templates[u.name])
	} else {
		deleteIf(pl, have.templates[u.name])
	}
	var state State
	if br.Spec.Job != nil {
		state = p.ensureJob(pl, br, u, have.jobs[u.name])
		deleteIf(pl, have.deployments[u.name])
	} else {
		state = p.ensureDeployment(pl, br, u, have.deployments[u.name])
		if j := have.jobs[u.name]; j != nil {
			p.deleteJob(pl, j, "")
		}
	}
	var svc *corev1.ServiceSpec
	if br.Spec.Services != nil && u.device != nil {
		svc = br.Spec.Services.PerDevice
	}
	if svc != nil {
		p.ensureService(pl, p.service(br, u, u.name, svc, map[string]string{LabelWorkload: u.name}), have.services[u.name])
	} else if u.name != br.Name {
		deleteIf(pl, have.services[u.name])
	}
	return state
}

// ensureJob plans u's Job: made when it has none; made anew when what
// makes it changed (sameJob); let go when it was deleted before it
// finished (made anew once gone); else left to run, or to stay finished,
// deleted or not, as the record of its result (FinalizerResult). It
// returns the Job's state.
func (p planner) ensureJob(pl *plan, br *Broker, u unit, j *batchv1.Job) State {
	want := p.job(br, u)
	switch {
	case j == nil:
		p.create(pl, want)
		return Pending
	case !sameJob(j, want, br):
		p.deleteJob(pl, j, "")
		p.create(pl, want)
		return Pending
	case j.DeletionTimestamp != nil && !finished(j):
		// Let go as seen, unfinished: one that finished since stays as
		// the record of its result.
		if i := slices.Index(j.Finalizers, FinalizerResult); i >= 0 {
			pl.actions = append(pl.actions, finalizersPatchAsSeen(j, slices.Delete(slices.Clone(j.Finalizers), i, i+1)))
		}
		return Pending
	case j.Annotations[AnnotationHash] == "":
		p.adopt(pl, j, want)
	case j.DeletionTimestamp == nil && !slices.Contains(j.Finalizers, FinalizerResult):
		pl.actions = append(pl.actions, finalizersPatch(j, append(slices.Clone(j.Finalizers), FinalizerResult)))
	}
	p.keepDevice(pl, j)
	return jobState(j)
}

// sameJob says whether j is the Job want is: of the same hash, or, made
// by an earlier release (no hash), for the Broker's generation.
func sameJob(j, want *batchv1.Job, br *Broker) bool {
	if h := j.Annotations[AnnotationHash]; h != "" {
		return h == want.Annotations[AnnotationHash]
	}
	g, err := strconv.ParseInt(j.Labels[LabelGeneration], 10, 64)
	return err == nil && g == br.Generation
}

// ensureDeployment plans u's Deployment: made; or updated to the
// Broker's template (the Deployment controller then rolls its pods), or
// back to it when edited (its replicas, image, the device's limits). It
// returns the Deployment's state.
func (p planner) ensureDeployment(pl *plan, br *Broker, u unit, d *appsv1.Deployment) State {
	want := p.deployment(br, u)
	if u.device != nil && *want.Spec.Replicas == 0 && ptr.Deref(br.Spec.Deployment.Replicas, 1) != 0 {
		pl.problems = append(pl.problems, problem{ReasonTooManyContainers, fmt.Sprintf(
			"Deployment %s: a pod's %d containers each take a slot of device %s, which has %d", u.name,
			len(br.Spec.Deployment.Template.Spec.Containers), u.device.ID, u.device.Capacity)})
	}
	switch {
	case d == nil:
		p.create(pl, want)
		return Pending
	case d.Annotations[AnnotationHash] != want.Annotations[AnnotationHash] || !derives(want.Labels, d.Labels) ||
		!deploymentAsWanted(want.Spec, d.Spec):
		next := d.DeepCopy()
		next.Labels, next.Annotations = withAll(d.Labels, want.Labels), withAll(d.Annotations, want.Annotations)
		next.OwnerReferences, next.Spec = want.OwnerReferences, want.Spec
		pl.actions = append(pl.actions, action{op: update, obj: next})
	}
	p.keepDevice(pl, d)
	return deploymentState(d)
}

// deploymentAsWanted says whether have holds everything of want, its pod
// template as the API server defaults it.
func deploymentAsWanted(want, have appsv1.DeploymentSpec) bool {
	want.Template = *defaultedPodTemplate(&want.Template)
	return equality.Semantic.DeepDerivative(want, have)
}

// ensureService plans a Service: made, or updated to what the Broker
// wants, or back to it when edited, keeping the addresses the API server
// gave it (a Service's cluster IP cannot change).
func (p planner) ensureService(pl *plan, want, have *corev1.Service) {
	switch {
	case have == nil:
		p.create(pl, want)
	case have.Annotations[AnnotationHash] != want.Annotations[AnnotationHash] || !derives(want.Labels, have.Labels) ||
		!equality.Semantic.DeepDerivative(*defaultedService(&want.Spec, &have.Spec), have.Spec):
		next := have.DeepCopy()
		spec := want.Spec
		if spec.ClusterIP == "" {
			spec.ClusterIP, spec.ClusterIPs = have.Spec.ClusterIP, have.Spec.ClusterIPs
		}
		if len(spec.IPFamilies) == 0 {
			spec.IPFamilies, spec.IPFamilyPolicy = have.Spec.IPFamilies, have.Spec.IPFamilyPolicy
		}
		next.Labels, next.Annotations = withAll(have.Labels, want.Labels), withAll(have.Annotations, want.Annotations)
		next.OwnerReferences, next.Spec = want.OwnerReferences, spec
		pl.actions = append(pl.actions, action{op: update, obj: next})
	}
}

// derives says whether have holds every entry of want.
func derives(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// withAll is have with want's entries over it.
func withAll(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}

// ensureTemplate plans a claim template: made, or, since its spec cannot
// change, deleted and made again. Claims made from the old one stay.
func (p planner) ensureTemplate(pl *plan, want, have *resourceapi.ResourceClaimTemplate) {
	if have != nil && have.Annotations[AnnotationHash] == want.Annotations[AnnotationHash] {
		return
	}
	deleteIf(pl, have)
	p.create(pl, want)
}

// ensurePoolService plans the Service over every workload of the Broker.
func (p planner) ensurePoolService(pl *plan, br *Broker, have owned) {
	if br.Spec.Services == nil || br.Spec.Services.Pool == nil {
		deleteIf(pl, have.services[br.Name])
		return
	}
	u := unit{name: br.Name}
	p.ensureService(pl, p.service(br, u, br.Name, br.Spec.Services.Pool, map[string]string{LabelBroker: br.Name}), have.services[br.Name])
}

// create plans want's create, unless an object of its kind and name is
// there (nameHeld).
func (p planner) create(pl *plan, want metav1.Object) {
	kind := kindOf(want)
	if p.holder != nil {
		if held := p.holder(kind, want.GetNamespace(), want.GetName()); held != nil {
			p.nameHeld(pl, want, held)
			return
		}
	}
	_, workload := want.(*batchv1.Job)
	if _, ok := want.(*appsv1.Deployment); ok {
		workload = true
	}
	pl.actions = append(pl.actions, action{op: create, obj: want, workload: workload})
}

// nameHeld plans for want, whose name held has: one the Broker does not
// own is reported, and not asked for again while it is there. One of
// its own is either on its way out (deleted to be made anew), and want
// is made once it is gone, or hidden from the controller's informers by
// an edit of its labels, which are put back.
func (p planner) nameHeld(pl *plan, want, held metav1.Object) {
	kind := kindOf(want)
	pl.nameFreed = true
	switch ref := metav1.GetControllerOfNoCopy(held); {
	case ref == nil || ref.UID != metav1.GetControllerOfNoCopy(want).UID:
		pl.problems = append(pl.problems, problem{ReasonNameTaken,
			fmt.Sprintf("%s %s: a %s of that name exists that the Broker does not own", ReasonNameTaken, want.GetName(), kind)})
	case held.GetDeletionTimestamp() == nil && !derives(want.GetLabels(), held.GetLabels()):
		shell, _ := want.(runtime.Object).DeepCopyObject().(metav1.Object)
		shell.SetUID(held.GetUID())
		shell.SetResourceVersion(held.GetResourceVersion())
		shell.SetLabels(held.GetLabels())
		pl.actions = append(pl.actions, patchOf(shell, jsonOp{Op: "add", Path: "/metadata/labels", Value: withAll(held.GetLabels(), want.GetLabels())}))
	}
}

// retire plans the end of the workloads of key, which the Broker no
// longer wants: at once when the device is there but no longer selected
// (or the Broker's strategy changed), else once the device (or the
// pool's Count devices) has been gone for the Broker's grace, counted
// from the workload's AnnotationGoneSince, which the first look that
// finds it gone writes. Until then the workload stays and is counted.
func (p planner) retire(pl *plan, br *Broker, key string, present bool, have owned) {
	objs := have.ofKey(key, br.Name)
	w := workloadOf(objs)
	if !present && w != nil && (key != "" || br.Spec.strategy() == Pool) {
		since, marked := goneSince(w)
		if !marked {
			since = p.gone.since(w.GetUID(), p.now)
			pl.actions = append(pl.actions, annotate(w, AnnotationGoneSince, since.UTC().Format(time.RFC3339)))
		} else {
			p.gone.forget(w.GetUID())
		}
		if left := br.Spec.grace() - p.now.Sub(since); left > 0 {
			pl.states[key] = stateOf(w)
			pl.again = minPositive(pl.again, left)
			return
		}
	}
	gone := ""
	if !present {
		gone = key
		if key == "" {
			gone = poolGone
		}
	}
	for _, obj := range objs {
		if j, ok := obj.(*batchv1.Job); ok {
			p.deleteJob(pl, j, gone)
			continue
		}
		pl.actions = append(pl.actions, action{op: remove, obj: obj, gone: gone})
	}
}

// keepDevice takes AnnotationGoneSince off w, a workload of a device the
// Broker wants: the device is back.
func (p planner) keepDevice(pl *plan, w metav1.Object) {
	p.gone.forget(w.GetUID())
	if _, ok := w.GetAnnotations()[AnnotationGoneSince]; ok {
		pl.actions = append(pl.actions, annotate(w, AnnotationGoneSince, ""))
	}
}

// deleteJob plans j's deletion, standing on gone (action.gone), then the
// letting go of its FinalizerResult, which completes it: deleted while it
// still holds the finalizer, a Job whose device came back at the last
// look is kept.
func (p planner) deleteJob(pl *plan, j *batchv1.Job, gone string) {
	pl.actions = append(pl.actions, action{op: remove, obj: j, gone: gone})
	if i := slices.Index(j.Finalizers, FinalizerResult); i >= 0 {
		a := finalizersPatch(j, slices.Delete(slices.Clone(j.Finalizers), i, i+1))
		a.gone, a.follows = gone, true
		pl.actions = append(pl.actions, a)
	}
}

// release plans the removal of FinalizerResult from j, if it has it.
func (p planner) release(pl *plan, j *batchv1.Job) {
	if i := slices.Index(j.Finalizers, FinalizerResult); i >= 0 {
		pl.actions = append(pl.actions, finalizersPatch(j, slices.Delete(slices.Clone(j.Finalizers), i, i+1)))
	}
}

// adopt plans giving j, a Job of an earlier release that is want, want's
// hash and FinalizerResult.
func (p planner) adopt(pl *plan, j, want *batchv1.Job) {
	if !slices.Contains(j.Finalizers, FinalizerResult) {
		pl.actions = append(pl.actions, finalizersPatch(j, append(slices.Clone(j.Finalizers), FinalizerResult)))
	}
	pl.actions = append(pl.actions, annotate(j, AnnotationHash, want.Annotations[AnnotationHash]))
}

// goneSince is w's AnnotationGoneSince, and whether it has a readable one.
func goneSince(w metav1.Object) (time.Time, bool) {
	v, ok := w.GetAnnotations()[AnnotationGoneSince]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// grace is how long a vanished device keeps its workloads. Seconds
// beyond what a Duration holds (some 292 years) are as long as it holds:
// their product would wrap to a negative grace, which is none.
func (s *Spec) grace() time.Duration {
	if s.DeletionGraceSeconds == nil {
		return DefaultDeletionGrace
	}
	return time.Duration(min(*s.DeletionGraceSeconds, math.MaxInt64/int64(time.Second))) * time.Second
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || b < a {
		return b
	}
	return a
}

// deleteIf plans obj's deletion, if there is an obj.
func deleteIf[T any, P interface {
	*T
	metav1.Object
}](pl *plan, obj P) {
	if obj != nil {
		pl.actions = append(pl.actions, action{op: remove, obj: obj})
	}
}

// keys are the device keys of the Broker's objects, sorted; "" for the
// pool's. The pool's Service is not any device's.
func (o owned) keys(broker string) []string {
	keys := map[string]bool{}
	for _, obj := range o.all() {
		if obj.GetName() == broker && kindOf(obj) == "Service" {
			continue
		}
		keys[obj.GetLabels()[LabelDevice]] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

// all is every object, in a fixed order: workloads first.
func (o owned) all() []metav1.Object {
	var out []metav1.Object
	out = appendSorted(out, o.jobs)
	out = appendSorted(out, o.deployments)
	out = appendSorted(out, o.services)
	return appendSorted(out, o.templates)
}

func appendSorted[T metav1.Object](out []metav1.Object, m map[string]T) []metav1.Object {
	for _, n := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[n])
	}
	return out
}

// ofKey is the objects of the device of key ("" the pool's workload),
// but not the pool's Service, named after the Broker.
func (o owned) ofKey(key, broker string) []metav1.Object {
	var out []metav1.Object
	for _, obj := range o.all() {
		if obj.GetLabels()[LabelDevice] != key || obj.GetName() == broker && kindOf(obj) == "Service" {
			continue
		}
		out = append(out, obj)
	}
	return out
}

// workloadOf is the Job or Deployment among objs, nil if none.
func workloadOf(objs []metav1.Object) metav1.Object {
	for _, obj := range objs {
		switch obj.(type) {
		case *batchv1.Job, *appsv1.Deployment:
			return obj
		}
	}
	return nil
}

// stateOf is a workload's state.
func stateOf(w metav1.Object) State {
	switch o := w.(type) {
	case *batchv1.Job:
		return jobState(o)
	case *appsv1.Deployment:
		return deploymentState(o)
	}
	return Pending
}

// jobState is Completed or Failed once the Job controller says so,
// Active while a pod of it is ready, else Pending.
func jobState(j *batchv1.Job) State {
	if finished(j) {
		for _, c := range j.Status.Conditions {
			if c.Status == corev1.ConditionTrue && c.Type == batchv1.JobFailed {
				return Failed
			}
		}
		return Completed
	}
	if j.Status.Ready != nil && *j.Status.Ready > 0 {
		return Active
	}
	return Pending
}

// finished says whether the Job controller says j completed or failed.
func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
}

// deploymentState is Active while a pod of d is available, else Pending.
func deploymentState(d *appsv1.Deployment) State {
	if d.Status.AvailableReplicas > 0 {
		return Active
	}
	return Pending
}

// kindOf is the kind of one of the controller's objects.
func kindOf(obj metav1.Object) string {
	switch obj.(type) {
	case *batchv1.Job:
		return "Job"
	case *appsv1.Deployment:
		return "Deployment"
	case *corev1.Service:
		return "Service"
	case *resourceapi.ResourceClaimTemplate:
		return "ResourceClaimTemplate"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", obj), "*")
}

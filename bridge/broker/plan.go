package broker

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
)

func (o op) String() string { return [...]string{"create", "update", "delete"}[o] }

// action is one write.
type action struct {
	op  op
	obj metav1.Object // with its UID for a delete, as a precondition
	// gone is the device key whose absence a delete stands on: the device
	// is looked for once more just before.
	gone string
	// workload: a create of the unit's workload, whose failure means the
	// unit has none.
	workload bool
}

func (a action) String() string {
	return fmt.Sprintf("%s %s %s/%s", a.op, kindOf(a.obj), a.obj.GetNamespace(), a.obj.GetName())
}

// plan is what one Broker wants done now: the writes, its workloads'
// status (the units' entries, by device key), and when to look again
// (a vanished device's grace), zero for no reason to.
type plan struct {
	actions []action
	entries map[string]WorkloadStatus
	again   time.Duration
}

// planner decides a Broker's writes from what is (the pool's devices
// and the Broker's objects) and what it wants.
type planner struct {
	builder
	now time.Time
}

// plan is what br wants done, given devices, the pool's devices now, and
// its objects.
func (p planner) plan(br *Broker, devices []Device, have owned) plan {
	pl := plan{entries: map[string]WorkloadStatus{}}
	prev := map[string]WorkloadStatus{}
	for _, e := range br.Status.Workloads {
		prev[e.Device] = e
	}
	wanted := map[string]bool{}
	for _, u := range p.units(br, devices) {
		wanted[u.key()] = true
		p.ensure(&pl, br, u, have, prev[u.key()])
	}
	p.ensurePoolService(&pl, br, have)
	present := map[string]bool{}
	for _, d := range devices {
		present[d.Key] = true
	}
	for _, key := range leftovers(br, have, prev) {
		if !wanted[key] {
			p.retire(&pl, br, key, present[key], have, prev[key])
		}
	}
	return pl
}

// units are the workloads br wants of devices: one per selected device,
// or one for the pool while it has Count selected devices.
func (p planner) units(br *Broker, devices []Device) []unit {
	var selected []Device
	for _, d := range devices {
		if br.Spec.Selector.selects(d) {
			selected = append(selected, d)
		}
	}
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

// selectedCount is how many of devices br selects.
func selectedCount(br *Broker, devices []Device) int {
	n := 0
	for _, d := range devices {
		if br.Spec.Selector.selects(d) {
			n++
		}
	}
	return n
}

// ensure plans u's objects: its workload made, brought to the Broker's
// template, or left as it is; its Service and claim template likewise.
func (p planner) ensure(pl *plan, br *Broker, u unit, have owned, prev WorkloadStatus) {
	e := WorkloadStatus{Device: u.key(), Kind: br.Spec.kind(), Name: u.name, Generation: br.Generation, State: Active}
	if u.device != nil {
		e.DeviceID, e.Node = u.device.ID, u.device.Node
	}
	// The claim template before the workload: the claim controller makes
	// a pod's claim from it, and fails the pod's until it exists.
	if p.dra[br.Spec.Pool] {
		p.ensureTemplate(pl, p.claimTemplate(br, u), have.templates[u.name])
	} else {
		deleteIf(pl, have.templates[u.name])
	}
	keep := true
	if br.Spec.Job != nil {
		keep = p.ensureJob(pl, br, u, have, prev, &e)
		deleteIf(pl, have.deployments[u.name])
	} else {
		p.ensureDeployment(pl, br, u, have)
		deleteIf(pl, have.jobs[u.name])
	}
	if keep {
		pl.entries[u.key()] = e
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
}

// ensureJob plans u's Job: made when it has none, made again when the
// Broker changed since, else left to run or to stay finished. A Job that
// finished for this generation and is gone since (deleted by hand, or by
// its ttlSecondsAfterFinished) is not run again: prev remembers it. It
// returns false when u has no Job to report.
func (p planner) ensureJob(pl *plan, br *Broker, u unit, have owned, prev WorkloadStatus, e *WorkloadStatus) bool {
	j := have.jobs[u.name]
	switch {
	case j != nil && jobGeneration(j) < br.Generation:
		pl.actions = append(pl.actions, action{op: remove, obj: j})
		pl.actions = append(pl.actions, action{op: create, obj: p.job(br, u), workload: true})
	case j != nil:
		e.Generation, e.State = jobGeneration(j), jobState(j)
	case prev.Name == u.name && prev.Generation == br.Generation && (prev.State == Completed || prev.State == Failed):
		*e = prev
		e.GoneSince = nil
	default:
		pl.actions = append(pl.actions, action{op: create, obj: p.job(br, u), workload: true})
	}
	return true
}

// ensureDeployment plans u's Deployment: made, or updated to the
// Broker's template (the Deployment controller then rolls its pods).
func (p planner) ensureDeployment(pl *plan, br *Broker, u unit, have owned) {
	want := p.deployment(br, u)
	d := have.deployments[u.name]
	switch {
	case d == nil:
		pl.actions = append(pl.actions, action{op: create, obj: want, workload: true})
	case d.Annotations[AnnotationHash] != want.Annotations[AnnotationHash]:
		next := d.DeepCopy()
		next.Labels, next.Annotations, next.OwnerReferences, next.Spec = want.Labels, want.Annotations, want.OwnerReferences, want.Spec
		pl.actions = append(pl.actions, action{op: update, obj: next})
	}
}

// ensureService plans a Service: made, or updated, keeping the addresses
// the API server gave it (a Service's cluster IP cannot change).
func (p planner) ensureService(pl *plan, want, have *corev1.Service) {
	switch {
	case have == nil:
		pl.actions = append(pl.actions, action{op: create, obj: want})
	case have.Annotations[AnnotationHash] != want.Annotations[AnnotationHash]:
		next := have.DeepCopy()
		spec := want.Spec
		if spec.ClusterIP == "" {
			spec.ClusterIP, spec.ClusterIPs = have.Spec.ClusterIP, have.Spec.ClusterIPs
		}
		if len(spec.IPFamilies) == 0 {
			spec.IPFamilies, spec.IPFamilyPolicy = have.Spec.IPFamilies, have.Spec.IPFamilyPolicy
		}
		next.Labels, next.Annotations, next.OwnerReferences, next.Spec = want.Labels, want.Annotations, want.OwnerReferences, spec
		pl.actions = append(pl.actions, action{op: update, obj: next})
	}
}

// ensureTemplate plans a claim template: made, or, since its spec cannot
// change, deleted and made again. Claims made from the old one stay.
func (p planner) ensureTemplate(pl *plan, want, have *resourceapi.ResourceClaimTemplate) {
	if have != nil && have.Annotations[AnnotationHash] == want.Annotations[AnnotationHash] {
		return
	}
	deleteIf(pl, have)
	pl.actions = append(pl.actions, action{op: create, obj: want})
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

// retire plans the end of the workloads of key, which the Broker no
// longer wants: at once when the device is there but no longer selected
// (or the Broker's strategy changed), else once the device has been gone
// for the Broker's grace. Until then the entry stays, saying since when.
func (p planner) retire(pl *plan, br *Broker, key string, present bool, have owned, prev WorkloadStatus) {
	objs := have.ofKey(key, br.Name)
	if !present && (key != "" || br.Spec.strategy() == Pool) {
		since := p.now
		if prev.GoneSince != nil {
			since = prev.GoneSince.Time
		}
		if left := br.Spec.grace() - p.now.Sub(since); left > 0 {
			if prev.Name == "" {
				prev = WorkloadStatus{Device: key, Kind: br.Spec.kind(), Generation: br.Generation, State: Active}
				if len(objs) > 0 {
					prev.Name = objs[0].GetName()
				}
			}
			prev.GoneSince = &metav1.Time{Time: since}
			pl.entries[key] = prev
			pl.again = minPositive(pl.again, left)
			return
		}
	}
	for _, obj := range objs {
		a := action{op: remove, obj: obj}
		if !present {
			a.gone = key
		}
		pl.actions = append(pl.actions, a)
	}
}

// grace is how long a vanished device keeps its workloads.
func (s *Spec) grace() time.Duration {
	if s.DeletionGraceSeconds == nil {
		return DefaultDeletionGrace
	}
	return time.Duration(*s.DeletionGraceSeconds) * time.Second
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

// leftovers are the device keys of the Broker's objects and of its
// status entries, sorted; "" for the pool's. The pool's Service is not
// any device's.
func leftovers(br *Broker, have owned, prev map[string]WorkloadStatus) []string {
	keys := map[string]bool{}
	for key := range prev {
		keys[key] = true
	}
	for _, obj := range have.all() {
		if obj.GetName() == br.Name && kindOf(obj) == "Service" {
			continue
		}
		keys[obj.GetLabels()[LabelDevice]] = true
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
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
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
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

// jobGeneration is the Broker generation a Job was made for.
func jobGeneration(j *batchv1.Job) int64 {
	g, _ := strconv.ParseInt(j.Labels[LabelGeneration], 10, 64)
	return g
}

// jobState is Completed or Failed once the Job controller says so.
func jobState(j *batchv1.Job) State {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return Completed
		case batchv1.JobFailed:
			return Failed
		}
	}
	return Active
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

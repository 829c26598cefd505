package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/instance"
)

const testPool = "camera-endpoint"

// camera is a shared device of testPool, of capacity 2.
func camera(id string, props map[string]string) Device {
	return Device{Key: instance.Name(testPool, id, "", true), Pool: testPool, ID: id, Shared: true, Capacity: 2, Properties: props}
}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "x"}, {Name: "b", Image: "x"}},
			RestartPolicy: corev1.RestartPolicyNever},
	}
}

// jobBroker is a Broker of a Job per camera, at generation gen.
func jobBroker(gen int64) *Broker {
	return &Broker{ObjectMeta: metav1.ObjectMeta{Name: "inventory", Namespace: "cams", UID: "b-uid", Generation: gen},
		Spec: Spec{Pool: testPool, Job: &batchv1.JobSpec{Template: podTemplate()}}}
}

func deploymentBroker(replicas int32) *Broker {
	br := jobBroker(1)
	br.Spec.Job = nil
	tpl := podTemplate()
	tpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	br.Spec.Deployment = &DeploymentTemplate{Replicas: &replicas, Template: tpl}
	return br
}

func newOwned() owned {
	return owned{jobs: map[string]*batchv1.Job{}, deployments: map[string]*appsv1.Deployment{},
		services: map[string]*corev1.Service{}, templates: map[string]*resourceapi.ResourceClaimTemplate{}}
}

var testNow = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

func testPlanner(dra ...string) planner {
	b := builder{domain: "cdi.local", dra: map[string]bool{}}
	for _, p := range dra {
		b.dra[p] = true
	}
	return planner{builder: b, now: testNow}
}

// existing is the object the API server would hold after the planned
// create: with a UID.
func existing[T metav1.Object](obj T) T {
	obj.SetUID(types.UID("uid-" + obj.GetName()))
	return obj
}

// actionsOf is the plan's actions as "op Kind name", in order; a patch
// says what it patches.
func actionsOf(pl plan) []string {
	out := make([]string, len(pl.actions))
	for i, a := range pl.actions {
		out[i] = a.op.String() + " " + kindOf(a.obj) + " " + a.obj.GetName()
		if a.op == patch {
			out[i] += " " + patchSays(a)
		}
		if a.gone != "" {
			out[i] += " (gone)"
		}
	}
	return out
}

// patchSays is what a patch does: "finalizers [..]", "+gone-since",
// "-gone-since", "+hash".
func patchSays(a action) string {
	var ops []jsonOp
	_ = json.Unmarshal(a.body, &ops)
	last := ops[len(ops)-1]
	switch {
	case strings.HasSuffix(last.Path, "finalizers"):
		return fmt.Sprintf("finalizers %v", last.Value)
	case last.Op == "remove":
		return "-" + strings.TrimPrefix(strings.TrimPrefix(last.Path, "/metadata/annotations/"), "cdi.local~1")
	case strings.Contains(last.Path, "broker-hash") || strings.Contains(fmt.Sprint(last.Value), "broker-hash"):
		return "+hash"
	}
	return "+gone-since"
}

func completed(j *batchv1.Job) *batchv1.Job {
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	return j
}

func deleted(j *batchv1.Job) *batchv1.Job {
	j.DeletionTimestamp = &metav1.Time{Time: testNow}
	return j
}

func goneAt(j *batchv1.Job, since time.Time) *batchv1.Job {
	j.Annotations[AnnotationGoneSince] = since.Format(time.RFC3339)
	return j
}

// earlier is j as an earlier release made it: its Broker's generation as
// a label, no hash, no finalizer.
func earlier(j *batchv1.Job, gen int64) *batchv1.Job {
	j.Labels[LabelGeneration] = strconv.FormatInt(gen, 10)
	j.Annotations, j.Finalizers = nil, nil
	return j
}

func TestPlanJobs(t *testing.T) {
	lobby, dock := camera("lobby", nil), camera("dock", nil)
	lobbyJob, dockJob := workloadName("inventory", lobby.Key), workloadName("inventory", dock.Key)
	p := testPlanner()
	jobOf := func(br *Broker) *batchv1.Job { return existing(p.job(br, p.units(br, []Device{lobby})[0])) }
	regraced := jobBroker(2)
	regraced.Spec.DeletionGraceSeconds = ptr.To[int64](300)
	changed := jobBroker(2)
	changed.Spec.Job.Template.Spec.Containers[0].Image = "y"
	release := "patch Job " + lobbyJob + " finalizers []"
	tests := []struct {
		name    string
		br      *Broker
		devices []Device
		have    *batchv1.Job
		nameOf  string // the controller of an object of the Job's name: "", "another", "its own"
		want    []string
		states  map[string]State
		again   time.Duration
	}{
		{name: "a Job per device", br: jobBroker(1), devices: []Device{lobby, dock},
			want:   []string{"create Job " + lobbyJob, "create Job " + dockJob},
			states: map[string]State{lobby.Key: Pending, dock.Key: Pending}},
		{name: "a completed Job is left alone", br: jobBroker(1), devices: []Device{lobby}, have: completed(jobOf(jobBroker(1))),
			states: map[string]State{lobby.Key: Completed}},
		{name: "a completed Job, deleted since (its TTL), stays the record of its result", br: jobBroker(1), devices: []Device{lobby},
			have: deleted(completed(jobOf(jobBroker(1)))), states: map[string]State{lobby.Key: Completed}},
		{name: "a Job deleted before it finished is let go", br: jobBroker(1), devices: []Device{lobby},
			have: deleted(jobOf(jobBroker(1))), want: []string{release}, states: map[string]State{lobby.Key: Pending}},
		{name: "a spec edit that does not make the Job leaves it", br: regraced, devices: []Device{lobby},
			have: completed(jobOf(jobBroker(1))), states: map[string]State{lobby.Key: Completed}},
		{name: "a Job that lost its finalizer gets it back", br: jobBroker(1), devices: []Device{lobby},
			have: func() *batchv1.Job { j := jobOf(jobBroker(1)); j.Finalizers = nil; return j }(),
			want: []string{"patch Job " + lobbyJob + " finalizers [" + FinalizerResult + "]"}, states: map[string]State{lobby.Key: Pending}},
		{name: "a changed template makes it anew", br: changed, devices: []Device{lobby}, have: completed(jobOf(jobBroker(1))),
			want:   []string{"delete Job " + lobbyJob, release, "create Job " + lobbyJob},
			states: map[string]State{lobby.Key: Pending}},
		{name: "an earlier release's Job of the generation is adopted", br: jobBroker(1), devices: []Device{lobby},
			have:   completed(earlier(jobOf(jobBroker(1)), 1)),
			want:   []string{"patch Job " + lobbyJob + " finalizers [" + FinalizerResult + "]", "patch Job " + lobbyJob + " +hash"},
			states: map[string]State{lobby.Key: Completed}},
		{name: "an earlier release's Job of an older generation is made anew", br: jobBroker(2), devices: []Device{lobby},
			have: completed(earlier(jobOf(jobBroker(1)), 1)),
			want: []string{"delete Job " + lobbyJob, "create Job " + lobbyJob}, states: map[string]State{lobby.Key: Pending}},
		{name: "a vanished device keeps its Job for the grace, which its Job records", br: jobBroker(1), have: jobOf(jobBroker(1)),
			want:   []string{"patch Job " + lobbyJob + " +gone-since"},
			states: map[string]State{lobby.Key: Pending}, again: DefaultDeletionGrace},
		{name: "counted from what the Job records", br: jobBroker(1), have: goneAt(jobOf(jobBroker(1)), testNow.Add(-time.Second)),
			states: map[string]State{lobby.Key: Pending}, again: DefaultDeletionGrace - time.Second},
		{name: "and loses it after", br: jobBroker(1), have: goneAt(completed(jobOf(jobBroker(1))), testNow.Add(-DefaultDeletionGrace)),
			want: []string{"delete Job " + lobbyJob + " (gone)", release + " (gone)"}},
		{name: "a device back within the grace keeps its Job", br: jobBroker(1), devices: []Device{lobby},
			have:   goneAt(completed(jobOf(jobBroker(1))), testNow.Add(-time.Second)),
			want:   []string{"patch Job " + lobbyJob + " -device-gone-since"},
			states: map[string]State{lobby.Key: Completed}},
		{name: "a device no longer selected loses its Job at once", br: withSelector(jobBroker(1), &Selector{DeviceIDs: []string{"dock"}}),
			devices: []Device{lobby, dock}, have: jobOf(jobBroker(1)),
			want:   []string{"create Job " + dockJob, "delete Job " + lobbyJob, release},
			states: map[string]State{dock.Key: Pending}},
		{name: "a name another object has is not asked for", br: jobBroker(1), devices: []Device{lobby}, nameOf: "another",
			states: map[string]State{lobby.Key: Pending}},
		{name: "a name its own deleted Job still has is waited for, not reported", br: jobBroker(1), devices: []Device{lobby},
			nameOf: "its own", states: map[string]State{lobby.Key: Pending}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			have := newOwned()
			if tc.have != nil {
				have.jobs[lobbyJob] = tc.have
			}
			p := p
			p.holder = func(_, ns, name string) metav1.Object {
				held := &metav1.ObjectMeta{Name: name, Namespace: ns, DeletionTimestamp: &metav1.Time{Time: testNow}}
				switch tc.nameOf {
				case "another":
					held.OwnerReferences = []metav1.OwnerReference{{UID: "another-uid", Controller: ptr.To(true)}}
				case "its own":
					held.OwnerReferences = []metav1.OwnerReference{{UID: tc.br.UID, Controller: ptr.To(true)}}
				default:
					return nil
				}
				return held
			}
			pl := p.plan(tc.br, tc.devices, have)
			if got := actionsOf(pl); !slices.Equal(got, tc.want) {
				t.Errorf("actions %q, want %q", got, tc.want)
			}
			if !maps.Equal(pl.states, tc.states) {
				t.Errorf("states %v, want %v", pl.states, tc.states)
			}
			if pl.again != tc.again {
				t.Errorf("look again in %v, want %v", pl.again, tc.again)
			}
			if taken := tc.nameOf == "another"; taken != (len(pl.problems) == 1 && pl.problems[0].reason == ReasonNameTaken) {
				t.Errorf("problems %v with the name taken by %q", pl.problems, tc.nameOf)
			}
			if pl.nameFreed != (tc.nameOf != "") {
				t.Errorf("waits for the name %v with it held by %q", pl.nameFreed, tc.nameOf)
			}
		})
	}
}

func withSelector(br *Broker, s *Selector) *Broker {
	br.Spec.Selector = s
	return br
}

// A Deployment per device runs at most as many pods as the device's
// slots allow, each container of a pod taking one; it is left alone
// while the Broker's template is the same (the API server's defaults
// filled in), updated when it changes, and put back when edited (its
// replicas, its image, the device's limits); a Pool Broker makes one
// over Count devices, while there are that many.
func TestPlanDeployments(t *testing.T) {
	p := testPlanner()
	lobby, dock := camera("lobby", nil), camera("dock", nil)
	br := deploymentBroker(5)
	pl := p.plan(br, []Device{lobby}, newOwned())
	if len(pl.actions) != 1 {
		t.Fatalf("actions %v, want one create", actionsOf(pl))
	}
	d := pl.actions[0].obj.(*appsv1.Deployment)
	if *d.Spec.Replicas != 1 {
		t.Errorf("replicas %d, want 1: the device's 2 slots, 2 a pod", *d.Spec.Replicas)
	}
	have := newOwned()
	have.deployments[d.Name] = defaulted(existing(d.DeepCopy()))
	if pl := p.plan(deploymentBroker(5), []Device{lobby}, have); len(pl.actions) != 0 {
		t.Errorf("the same template: %v, want no write", actionsOf(pl))
	}
	for name, edit := range map[string]func(*appsv1.Deployment){
		"replicas": func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) },
		"image":    func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "other" },
		"limits": func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[1].Resources = corev1.ResourceRequirements{}
		},
		"label": func(d *appsv1.Deployment) { delete(d.Labels, LabelBroker) },
	} {
		edited := newOwned()
		e := have.deployments[d.Name].DeepCopy()
		edit(e)
		edited.deployments[d.Name] = e
		if got := actionsOf(p.plan(deploymentBroker(5), []Device{lobby}, edited)); !slices.Equal(got, []string{"update Deployment " + d.Name}) {
			t.Errorf("its %s edited: %v, want an update putting it back", name, got)
		}
	}
	changed := deploymentBroker(5)
	changed.Spec.Deployment.Template.Spec.Containers[0].Image = "y"
	if got := actionsOf(p.plan(changed, []Device{lobby}, have)); !slices.Equal(got, []string{"update Deployment " + d.Name}) {
		t.Errorf("a changed template: %v, want an update", got)
	}
	pool := deploymentBroker(1)
	pool.Spec.Strategy, pool.Spec.Count = Pool, 2
	if pl := p.plan(pool, []Device{lobby}, newOwned()); len(pl.actions) != 0 {
		t.Errorf("a Pool Broker of 2 with one device: %v, want nothing", actionsOf(pl))
	}
	pl = p.plan(pool, []Device{lobby, dock}, newOwned())
	if got := actionsOf(pl); !slices.Equal(got, []string{"create Deployment inventory"}) {
		t.Fatalf("a Pool Broker of 2 with two devices: %v", got)
	}
	limits := pl.actions[0].obj.(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Resources.Limits
	if q := limits["cdi.local/"+testPool]; q.Value() != 2 {
		t.Errorf("the pool's workload asks for %v", limits)
	}
}

// A pod of more containers than its device has slots cannot run: its
// Deployment runs none, and the plan says why.
func TestPlanTooManyContainers(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	lobby.Capacity = 1
	pl := p.plan(deploymentBroker(1), []Device{lobby}, newOwned())
	d := pl.actions[0].obj.(*appsv1.Deployment)
	if *d.Spec.Replicas != 0 || len(pl.problems) != 1 || pl.problems[0].reason != ReasonTooManyContainers {
		t.Errorf("replicas %d, problems %v: want 0 and %s", *d.Spec.Replicas, pl.problems, ReasonTooManyContainers)
	}
}

// defaulted is d with some of what the API server fills in.
func defaulted(d *appsv1.Deployment) *appsv1.Deployment {
	d.Spec.RevisionHistoryLimit, d.Spec.ProgressDeadlineSeconds = ptr.To[int32](10), ptr.To[int32](600)
	d.Spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	spec := &d.Spec.Template.Spec
	spec.DNSPolicy, spec.SchedulerName, spec.TerminationGracePeriodSeconds = corev1.DNSClusterFirst, "default-scheduler", ptr.To[int64](30)
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.ImagePullPolicy, c.TerminationMessagePath = corev1.PullIfNotPresent, "/dev/termination-log"
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	d.Annotations["deployment.kubernetes.io/revision"] = "1"
	return d
}

// Every container of a device's workload is given the device, the pods
// carry the Broker's labels beside the template's, and the objects are
// owned by the Broker.
func TestBuildDevicePlugins(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := jobBroker(3)
	u := p.units(br, []Device{lobby})[0]
	j := p.job(br, u)
	res := corev1.ResourceName("cdi.local/" + lobby.Key)
	for _, c := range j.Spec.Template.Spec.Containers {
		if q := c.Resources.Limits[res]; !q.Equal(resource.MustParse("1")) {
			t.Errorf("container %s limits %v, want %s: 1", c.Name, c.Resources.Limits, res)
		}
	}
	labels := j.Spec.Template.Labels
	if labels["app"] != "x" || labels[LabelBroker] != "inventory" || labels[LabelDevice] != lobby.Key || labels[LabelWorkload] != j.Name {
		t.Errorf("pod labels %v", labels)
	}
	if j.Annotations[AnnotationHash] == "" || !slices.Contains(j.Finalizers, FinalizerResult) || !isOwner(j, br) || j.Namespace != "cams" {
		t.Errorf("Job annotations %v, finalizers %v, owners %v, namespace %s", j.Annotations, j.Finalizers, j.OwnerReferences, j.Namespace)
	}
	if br.Spec.Job.Template.Labels[LabelBroker] != "" {
		t.Error("building changed the Broker's own template")
	}
}

// Through DRA a device's workload has a claim template selecting it by
// pool and id, every container the claim, and a device of one node the
// node, kept beside the template's own affinity.
func TestBuildDRA(t *testing.T) {
	p := testPlanner("tty-generic")
	tty := Device{Key: instance.Name("tty-generic", "tty13", "n1", false), Pool: "tty-generic", ID: "tty13", Node: "n1", Capacity: 1}
	br := jobBroker(1)
	br.Spec.Pool = "tty-generic"
	br.Spec.Job.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
		}},
	}}
	pl := p.plan(br, []Device{tty}, newOwned())
	if got := actionsOf(pl); len(got) != 2 || !strings.HasPrefix(got[0], "create ResourceClaimTemplate ") || !strings.HasPrefix(got[1], "create Job ") {
		t.Fatalf("actions %v, want the claim template, then the Job", got)
	}
	tpl, job := pl.actions[0].obj.(*resourceapi.ResourceClaimTemplate), pl.actions[1].obj.(*batchv1.Job)
	spec := job.Spec.Template.Spec
	if len(spec.ResourceClaims) != 1 || ptr.Deref(spec.ResourceClaims[0].ResourceClaimTemplateName, "") != tpl.Name {
		t.Errorf("pod claims %+v, want the template %s", spec.ResourceClaims, tpl.Name)
	}
	for _, c := range spec.Containers {
		if len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != claimName || len(c.Resources.Limits) != 0 {
			t.Errorf("container %s resources %+v", c.Name, c.Resources)
		}
	}
	term := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	if len(term.MatchExpressions) != 1 || len(term.MatchFields) != 1 || term.MatchFields[0].Values[0] != "n1" {
		t.Errorf("node selector term %+v, want the zone kept and node n1 added", term)
	}
	want := `device.driver == "cdi.local" && device.attributes["cdi.local"].pool == "tty-generic" && device.attributes["cdi.local"].id == "tty13"`
	if got := tpl.Spec.Spec.Devices.Requests[0].Exactly; got.Selectors[0].CEL.Expression != want || got.DeviceClassName != "tty-generic.cdi.local" {
		t.Errorf("claim request %+v\nwant selector %s", got, want)
	}
}

// Services per device select the device's workload, the pool's Service
// every pod of the Broker; removed from the Broker, they are deleted.
func TestPlanServices(t *testing.T) {
	p := testPlanner()
	lobby := camera("lobby", nil)
	br := deploymentBroker(1)
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		Pool: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	pl := p.plan(br, []Device{lobby}, newOwned())
	have := newOwned()
	var svcs []*corev1.Service
	for _, a := range pl.actions {
		if s, ok := a.obj.(*corev1.Service); ok {
			svcs = append(svcs, s)
			live := s.DeepCopy() // as the API server defaults it
			live.Spec.Ports[0].TargetPort = intstr.FromInt32(live.Spec.Ports[0].Port)
			have.add(existing(live))
			continue
		}
		have.add(existing(a.obj))
	}
	if len(svcs) != 2 || svcs[0].Spec.Selector[LabelWorkload] == "" || svcs[1].Name != "inventory" || svcs[1].Spec.Selector[LabelBroker] != "inventory" {
		t.Fatalf("services %+v", svcs)
	}
	if pl := p.plan(br, []Device{lobby}, have); len(pl.actions) != 0 {
		t.Errorf("again: %v, want nothing", actionsOf(pl))
	}
	br.Spec.Services = nil
	if got := actionsOf(p.plan(br, []Device{lobby}, have)); len(got) != 2 || !strings.HasPrefix(got[0], "delete Service") || !strings.HasPrefix(got[1], "delete Service") {
		t.Errorf("without services: %v, want both deleted", got)
	}
}

// A workload's name is the Broker's and the device's alone, at most 63
// characters; two Brokers whose names share their first 52 characters,
// and two devices, never share one.
func TestWorkloadName(t *testing.T) {
	key := instance.Name(testPool, "lobby", "", true)
	long, longer := strings.Repeat("a", 52)+"-x", strings.Repeat("a", 52)+"-y"
	for _, tc := range []struct{ broker, key string }{{"inventory", key}, {long, key}, {"x-", key}, {"inventory", ""}, {long, ""}} {
		got := workloadName(tc.broker, tc.key)
		if len(got) > 63 || strings.Contains(got, "--") || got != workloadName(tc.broker, tc.key) {
			t.Errorf("workloadName(%q, %q) = %q", tc.broker, tc.key, got)
		}
	}
	if workloadName("inventory", key) == workloadName("inventory", instance.Name(testPool, "dock", "", true)) {
		t.Error("two devices, one name")
	}
	if a, b := workloadName(long, key), workloadName(longer, key); a == b {
		t.Errorf("Brokers %s and %s share the workload name %s", long, longer, a)
	}
	if got := workloadName("inventory", key); got != "inventory-"+hex10(key) {
		t.Errorf("a short Broker's workload name changed: %s", got)
	}
}

// The claim's selector is CEL: ids and values are quoted as CEL string
// literals, so that one holding a quote or a backslash selects itself
// and nothing more; a property no published device can have (its name
// not a C identifier) selects nothing.
func TestCELSelector(t *testing.T) {
	b := builder{domain: "cdi.local", dra: map[string]bool{"p": true}}
	br := &Broker{Spec: Spec{Pool: "p"}}
	dev := &Device{ID: `a" || true || "`}
	tests := []struct {
		name string
		sel  *Selector
		u    unit
		want string
	}{
		{"a device by id", nil, unit{device: dev},
			`device.driver == "cdi.local" && device.attributes["cdi.local"].pool == "p" && device.attributes["cdi.local"].id == "a\" || true || \""`},
		{"the pool by ids and properties", &Selector{DeviceIDs: []string{"x", `y\`}, Properties: map[string]string{"site": "lab", "floor": "1"}}, unit{},
			`device.driver == "cdi.local" && device.attributes["cdi.local"].pool == "p" && device.attributes["cdi.local"].id in ["x", "y\\"]` +
				` && has(device.attributes["cdi.local"].floor) && device.attributes["cdi.local"].floor == "1"` +
				` && has(device.attributes["cdi.local"].site) && device.attributes["cdi.local"].site == "lab"`},
		{"a property no device publishes", &Selector{Properties: map[string]string{"pci-address": "x"}}, unit{}, "false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br.Spec.Selector = tc.sel
			if got := b.celSelector(br, tc.u); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

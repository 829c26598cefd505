package broker

import (
	"maps"
	"slices"
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

// summary is the plan's actions as "op Kind name", in order.
func summary(pl plan) []string {
	out := make([]string, len(pl.actions))
	for i, a := range pl.actions {
		out[i] = a.op.String() + " " + kindOf(a.obj) + " " + a.obj.GetName()
		if a.gone != "" {
			out[i] += " (gone)"
		}
	}
	return out
}

func completed(j *batchv1.Job) *batchv1.Job {
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	return j
}

func TestPlanJobs(t *testing.T) {
	lobby, dock := camera("lobby", nil), camera("dock", nil)
	lobbyJob, dockJob := workloadName("inventory", lobby.Key), workloadName("inventory", dock.Key)
	p := testPlanner()
	gone := func(e WorkloadStatus, since time.Time) WorkloadStatus {
		e.GoneSince = &metav1.Time{Time: since}
		return e
	}
	done := WorkloadStatus{Device: lobby.Key, DeviceID: "lobby", Kind: "Job", Name: lobbyJob, Generation: 1, State: Completed}
	tests := []struct {
		name    string
		br      *Broker
		devices []Device
		have    func(o owned)
		want    []string
		states  map[string]State
		again   time.Duration
	}{
		{name: "a Job per device", br: jobBroker(1), devices: []Device{lobby, dock},
			want:   []string{"create Job " + lobbyJob, "create Job " + dockJob},
			states: map[string]State{lobby.Key: Active, dock.Key: Active}},
		{name: "a completed Job is left alone", br: jobBroker(1), devices: []Device{lobby},
			have: func(o owned) {
				o.jobs[lobbyJob] = completed(existing(p.job(jobBroker(1), p.units(jobBroker(1), []Device{lobby})[0])))
			},
			states: map[string]State{lobby.Key: Completed}},
		{name: "a completed Job, since deleted, is not run again", br: withStatus(jobBroker(1), done), devices: []Device{lobby},
			states: map[string]State{lobby.Key: Completed}},
		{name: "a new generation runs it again", br: withStatus(jobBroker(2), done), devices: []Device{lobby},
			want: []string{"create Job " + lobbyJob}, states: map[string]State{lobby.Key: Active}},
		{name: "a Job of an older generation is replaced", br: jobBroker(2), devices: []Device{lobby},
			have: func(o owned) {
				o.jobs[lobbyJob] = completed(existing(p.job(jobBroker(1), p.units(jobBroker(1), []Device{lobby})[0])))
			},
			want:   []string{"delete Job " + lobbyJob, "create Job " + lobbyJob},
			states: map[string]State{lobby.Key: Active}},
		{name: "a vanished device keeps its Job for the grace", br: jobBroker(1), devices: nil,
			have: func(o owned) {
				o.jobs[lobbyJob] = existing(p.job(jobBroker(1), p.units(jobBroker(1), []Device{lobby})[0]))
			},
			states: map[string]State{lobby.Key: Active}, again: DefaultDeletionGrace},
		{name: "and loses it after", br: withStatus(jobBroker(1), gone(done, testNow.Add(-DefaultDeletionGrace))), devices: nil,
			have: func(o owned) {
				o.jobs[lobbyJob] = existing(p.job(jobBroker(1), p.units(jobBroker(1), []Device{lobby})[0]))
			},
			want: []string{"delete Job " + lobbyJob + " (gone)"}},
		{name: "a device back within the grace keeps its Job", br: withStatus(jobBroker(1), gone(done, testNow.Add(-time.Second))),
			devices: []Device{lobby}, states: map[string]State{lobby.Key: Completed}},
		{name: "a device no longer selected loses its Job at once", br: withSelector(jobBroker(1), &Selector{DeviceIDs: []string{"dock"}}),
			devices: []Device{lobby, dock},
			have: func(o owned) {
				o.jobs[lobbyJob] = existing(p.job(jobBroker(1), p.units(jobBroker(1), []Device{lobby})[0]))
			},
			want: []string{"create Job " + dockJob, "delete Job " + lobbyJob}, states: map[string]State{dock.Key: Active}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			have := newOwned()
			if tc.have != nil {
				tc.have(have)
			}
			pl := p.plan(tc.br, tc.devices, have)
			if got := summary(pl); !slices.Equal(got, tc.want) {
				t.Errorf("actions %q, want %q", got, tc.want)
			}
			states := map[string]State{}
			for k, e := range pl.entries {
				states[k] = e.State
			}
			if !maps.Equal(states, tc.states) {
				t.Errorf("states %v, want %v", states, tc.states)
			}
			if pl.again != tc.again {
				t.Errorf("look again in %v, want %v", pl.again, tc.again)
			}
		})
	}
}

func withStatus(br *Broker, e ...WorkloadStatus) *Broker {
	br.Status.Workloads = e
	return br
}

func withSelector(br *Broker, s *Selector) *Broker {
	br.Spec.Selector = s
	return br
}

// A Deployment per device runs at most the device's capacity, is left
// alone while the Broker's template is the same, and updated when it
// changes; a Pool Broker makes one over Count devices, while there are
// that many.
func TestPlanDeployments(t *testing.T) {
	p := testPlanner()
	lobby, dock := camera("lobby", nil), camera("dock", nil)
	br := deploymentBroker(5)
	pl := p.plan(br, []Device{lobby}, newOwned())
	if len(pl.actions) != 1 {
		t.Fatalf("actions %v, want one create", summary(pl))
	}
	d := pl.actions[0].obj.(*appsv1.Deployment)
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want the device's capacity 2", *d.Spec.Replicas)
	}
	have := newOwned()
	have.deployments[d.Name] = existing(d)
	if pl := p.plan(deploymentBroker(5), []Device{lobby}, have); len(pl.actions) != 0 {
		t.Errorf("the same template: %v, want no write", summary(pl))
	}
	changed := deploymentBroker(5)
	changed.Spec.Deployment.Template.Spec.Containers[0].Image = "y"
	if got := summary(p.plan(changed, []Device{lobby}, have)); !slices.Equal(got, []string{"update Deployment " + d.Name}) {
		t.Errorf("a changed template: %v, want an update", got)
	}
	pool := deploymentBroker(1)
	pool.Spec.Strategy, pool.Spec.Count = Pool, 2
	if pl := p.plan(pool, []Device{lobby}, newOwned()); len(pl.actions) != 0 {
		t.Errorf("a Pool Broker of 2 with one device: %v, want nothing", summary(pl))
	}
	pl = p.plan(pool, []Device{lobby, dock}, newOwned())
	if got := summary(pl); !slices.Equal(got, []string{"create Deployment inventory"}) {
		t.Fatalf("a Pool Broker of 2 with two devices: %v", got)
	}
	limits := pl.actions[0].obj.(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Resources.Limits
	if q := limits["cdi.local/"+testPool]; q.Value() != 2 {
		t.Errorf("the pool's workload asks for %v", limits)
	}
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
	if j.Labels[LabelGeneration] != "3" || !isOwner(j, br) || j.Namespace != "cams" {
		t.Errorf("Job labels %v, owners %v, namespace %s", j.Labels, j.OwnerReferences, j.Namespace)
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
	if got := summary(pl); len(got) != 2 || !strings.HasPrefix(got[0], "create ResourceClaimTemplate ") || !strings.HasPrefix(got[1], "create Job ") {
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
		have.add(existing(a.obj))
		if s, ok := a.obj.(*corev1.Service); ok {
			svcs = append(svcs, s)
		}
	}
	if len(svcs) != 2 || svcs[0].Spec.Selector[LabelWorkload] == "" || svcs[1].Name != "inventory" || svcs[1].Spec.Selector[LabelBroker] != "inventory" {
		t.Fatalf("services %+v", svcs)
	}
	if pl := p.plan(br, []Device{lobby}, have); len(pl.actions) != 0 {
		t.Errorf("again: %v, want nothing", summary(pl))
	}
	br.Spec.Services = nil
	if got := summary(p.plan(br, []Device{lobby}, have)); len(got) != 2 || !strings.HasPrefix(got[0], "delete Service") || !strings.HasPrefix(got[1], "delete Service") {
		t.Errorf("without services: %v, want both deleted", got)
	}
}

func TestWorkloadName(t *testing.T) {
	key := instance.Name(testPool, "lobby", "", true)
	long := strings.Repeat("a", 63)
	for _, tc := range []struct{ broker, key string }{{"inventory", key}, {long, key}, {"x-", key}, {"inventory", ""}} {
		got := workloadName(tc.broker, tc.key)
		if len(got) > 63 || strings.Contains(got, "--") || got != workloadName(tc.broker, tc.key) {
			t.Errorf("workloadName(%q, %q) = %q", tc.broker, tc.key, got)
		}
	}
	if workloadName("inventory", key) == workloadName("inventory", instance.Name(testPool, "dock", "", true)) {
		t.Error("two devices, one name")
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

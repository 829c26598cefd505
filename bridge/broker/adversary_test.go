package broker

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/spec"
)

// Adversarial tests: each shows a way the controller breaks what its
// package comment promises, against the real API server of startHarness.

// TestAdversaryNewLeaderRewritesNothingWithServices shows that a new
// leader PUTs every Service of a Broker whose Service spec leaves its
// ports' targetPort to the API server (as the CRD's own description and
// most Services do): the API server fills it in, the planner's
// DeepDerivative sees 0 against 8554 and updates the Service back, at
// every look. The update changes nothing in the end (the API server
// defaults it again), so it loops only with the looks, but each look
// of such a Broker costs a PUT per device, and a failover of a Broker
// over 1,000 devices is 1,000 PUTs: "a restarted or new leader rewrites
// nothing" does not hold.
func TestAdversaryNewLeaderRewritesNothingWithServices(t *testing.T) {
	h := startHarness(t)
	cam := h.store.set("svc-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + cam.Name: 2})
	stop := h.run(t, nil, nil)
	br := deploymentsBroker("served", 1, 1)
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8554}}}}
	h.create(t, br)
	name := workloadName("served", cam.Name)
	if !within(t, 30*time.Second, "the Deployment and its Service", func() bool {
		_, errD := h.Client.AppsV1().Deployments(h.Namespace).Get(t.Context(), name, metav1.GetOptions{})
		_, errS := h.Client.CoreV1().Services(h.Namespace).Get(t.Context(), name, metav1.GetOptions{})
		return errD == nil && errS == nil
	}) {
		return
	}
	time.Sleep(3 * time.Second)
	stop()
	h.writes.take()
	l := &looks{}
	h.run(t, nil, func(c *Controller) { c.afterLook = l.hook })
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(context.Context) (bool, error) {
		return l.settled([]string{h.Namespace + "/served"}, 1, 3*workloadSettle), nil
	})
	if err != nil {
		t.Fatalf("the new controller never looked at the Broker: %v", err)
	}
	if w := h.writes.take(); len(w) != 0 {
		t.Errorf("a new leader wrote %v, want nothing", w)
	}
}

// TestAdversaryJobDeletedBeforeFinishingIsMadeAnew shows that a Job a
// user deletes before it finished (here a suspended one) is not made
// anew once it is gone, as the package comment promises ("one deleted
// before it finished is let go and made anew"): the controller lets go
// of its FinalizerResult with a patch, remembers the API server's answer
// (recentWrites.wrote), and the API server deletes the Job at that
// patch; the informer's deletion does not clear the memory (only the
// controller's own deletes do), so for recentTTL (2 minutes) every look
// sees the gone Job, deleted and unfinished, and plans nothing; and
// nothing queues the Broker again after that but the 10-minute resync.
// The device has no Job for up to 10 minutes.
func TestAdversaryJobDeletedBeforeFinishingIsMadeAnew(t *testing.T) {
	h := startHarness(t)
	h.store.set("redo-cam", clusterNode)
	h.run(t, nil, nil)
	h.create(t, suspendedJobs("redo"))
	var before types.UID
	if !within(t, 30*time.Second, "the device's Job", func() bool {
		j, ok := h.jobs(t, "redo")["redo-cam"]
		before = j.UID
		return ok
	}) {
		return
	}
	j := h.jobs(t, "redo")["redo-cam"]
	if err := h.Client.BatchV1().Jobs(h.Namespace).Delete(t.Context(), j.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	within(t, 30*time.Second, "the Job let go of, and made anew", func() bool {
		j, ok := h.jobs(t, "redo")["redo-cam"]
		return ok && j.UID != before
	})
	j, ok := h.jobs(t, "redo")["redo-cam"]
	t.Logf("%v after the delete: the device's Job %v (present %v, was %s)", time.Since(deleted).Round(time.Second), j.UID, ok, before)
}

// TestAdversaryDeletedBrokerReleasesItsFinishedJobs shows that a Job
// kept as the record of its result (finished, then deleted, here by
// its user; ttlSecondsAfterFinished does the same) stays for ever once
// its Broker is deleted: the garbage collector does nothing to a
// dependent already being deleted, so no event of the Job follows the
// Broker's deletion, the Brokers' informer has no delete handler, and
// the resync queues existing Brokers only; releaseOrphans, which would
// let go of its FinalizerResult, never runs for the key. The Job (and
// the finalizer) is stuck until the bridge restarts, and a Broker made
// again under the name finds it... only then.
func TestAdversaryDeletedBrokerReleasesItsFinishedJobs(t *testing.T) {
	h := startHarness(t)
	cam := h.store.set("record-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + cam.Name: 2})
	h.run(t, nil, nil)
	h.create(t, jobsBroker("record", 60))
	h.succeed(t, h.waitPods(t, LabelBroker+"=record", 1, "scheduled", scheduled))
	h.waitBroker(t, "", "record", "Completed", func(br *Broker) bool { return br.Status.Completed == 1 })
	j := h.jobs(t, "record")["record-cam"]
	if err := h.Client.BatchV1().Jobs(h.Namespace).Delete(t.Context(), j.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	// Kept, deleted, as the record of its result.
	time.Sleep(5 * time.Second)
	if got, ok := h.jobs(t, "record")["record-cam"]; !ok || got.UID != j.UID {
		t.Fatalf("the finished Job, deleted, is not kept: %v", ok)
	}
	if err := h.dyn.Resource(Resource).Namespace(h.Namespace).Delete(t.Context(), "record", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := within(t, 60*time.Second, "the Job of the deleted Broker gone", func() bool {
		_, err := h.Client.BatchV1().Jobs(h.Namespace).Get(t.Context(), j.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if !gone {
		got, err := h.Client.BatchV1().Jobs(h.Namespace).Get(t.Context(), j.Name, metav1.GetOptions{})
		if err == nil {
			t.Logf("the Job: deleted %v, finalizers %v, owner %v", got.DeletionTimestamp, got.Finalizers, got.OwnerReferences)
		}
	}
}

// TestAdversaryUnlabelledDeploymentIsPutBack shows that a Deployment the
// controller made whose LabelBroker a user (or a tool that rewrites
// labels) removes is lost to the controller: its informers watch only
// objects with the label, so it neither undoes that edit nor any other
// of that Deployment (scaled to 9 here, past its device's slots), counts
// it, or deletes it when its device goes. Its create, asked for again,
// finds the name held by an object of its own and waits, silently, for
// it to go: the status says Created, Pending, for ever. "Edits of
// Deployments/Services undone" does not hold for this edit.
func TestAdversaryUnlabelledDeploymentIsPutBack(t *testing.T) {
	h := startHarness(t)
	cam := h.store.set("unlabelled-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + cam.Name: 2})
	h.run(t, nil, nil)
	h.create(t, deploymentsBroker("unlabelled", 1, 1))
	name := workloadName("unlabelled", cam.Name)
	deps := h.Client.AppsV1().Deployments(h.Namespace)
	if !within(t, 30*time.Second, "the Deployment", func() bool {
		_, err := deps.Get(t.Context(), name, metav1.GetOptions{})
		return err == nil
	}) {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelBroker: nil}},
		"spec": map[string]any{"replicas": 9}})
	if _, err := deps.Patch(t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Any look at the Broker: an edit of its spec.
	h.update(t, "unlabelled", func(s *Spec) { s.DeletionGraceSeconds = ptr.To[int64](61) })
	var last string
	if !within(t, 30*time.Second, "the Deployment's label and replicas put back", func() bool {
		d, err := deps.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = d.Labels[LabelBroker] + " replicas " + string(rune('0'+ptr.Deref(d.Spec.Replicas, 1)))
		return d.Labels[LabelBroker] == "unlabelled" && ptr.Deref(d.Spec.Replicas, 1) == 1
	}) {
		br := h.broker(t, "unlabelled")
		t.Logf("the Deployment: label %q; the Broker: %+v", last, br.Status)
	}
}

// TestAdversaryPatchRefusedByPolicyIsBackedOffAndTold shows that a patch
// the API server refuses as Invalid, as a ValidatingAdmissionPolicy
// refuses by default (here one that forbids the gone-since annotation on
// Jobs), is retried every second for ever, without backoff and without a
// word in the status: apply takes a patch's Invalid for "changed since
// it was seen" (retrySoon), which Forgets the Broker's backoff and
// queues it again after retryFirst. Meanwhile the grace of the vanished
// device, which that patch was to start, never starts (every look
// counts from now), so its Job is never deleted, and Created and Ready
// say nothing of why. A write failure is to be retried with a growing
// backoff and reported.
func TestAdversaryPatchRefusedByPolicyIsBackedOffAndTold(t *testing.T) {
	h := startHarness(t)
	if !h.policedJob(t, 3) {
		return
	}
	h.writes.take()
	h.store.set("policed-cam")
	// Created says why while the patch is refused: until the grace's
	// end, when the Job goes and nothing is wanted.
	patches, told := h.watchRefusals(t)
	// With the queue's backoff (1, 2, 4, 8 s) that is at most 5 or so.
	if patches > 6 {
		t.Errorf("%d PATCHes of the Job in 20 s, each refused by the same policy; want a growing backoff (at most 6)", patches)
	}
	if told == "" {
		t.Errorf("Created never False saying that the Job's patch is refused")
	}
	if _, ok := h.jobs(t, "policed")["policed-cam"]; ok {
		t.Errorf("the Job of the device gone 20 s is there, its grace 3 s: the grace never starts")
	}
}

// TestAdversaryBrokerBeingDeletedMakesNoWorkloads shows that a Broker
// being deleted (its deletionTimestamp set, held a while by a finalizer
// of someone's: a backup tool's, a GitOps tool's) goes on making
// workloads: a device that appears meanwhile gets a Job, whose pods run
// for a Broker its user deleted. The controller never looks at the
// Broker's deletionTimestamp. Kubernetes's own controllers (Deployment,
// Job, ReplicaSet) make nothing for an object being deleted. (Deleted in
// the foreground instead, its unfinished Jobs, which the garbage
// collector deletes, would be let go of and made anew, but for
// recentWrites' memory of the finalizer's patch, which hides the gone
// Job for two minutes: TestAdversaryJobDeletedBeforeFinishingIsMadeAnew.)
func TestAdversaryBrokerBeingDeletedMakesNoWorkloads(t *testing.T) {
	h := startHarness(t)
	h.store.set("doomed-cam", clusterNode)
	h.run(t, nil, nil)
	br := suspendedJobs("doomed")
	br.Finalizers = []string{"example.com/hold"}
	h.create(t, br)
	if !within(t, 30*time.Second, "the device's Job", func() bool { return len(h.jobs(t, "doomed")) == 1 }) {
		return
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, _ = h.dyn.Resource(Resource).Namespace(h.Namespace).Patch(context.Background(), "doomed", types.MergePatchType, patch, metav1.PatchOptions{})
	})
	if err := h.dyn.Resource(Resource).Namespace(h.Namespace).Delete(t.Context(), "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitBroker(t, "", "doomed", "being deleted", func(br *Broker) bool { return br.DeletionTimestamp != nil })
	seen := h.watchJobs(t, "doomed")
	h.store.set("late-cam", clusterNode)
	time.Sleep(10 * time.Second)
	if made := creations(seen()); len(made) != 0 {
		t.Errorf("Jobs made after the Broker was deleted: %v; want none", made)
	}
}

// TestAdversaryStaleSliceGenerationDoesNotBlockDeletes shows that the
// last look before a delete disagrees with the look that decided it in
// a pool served through DRA while a slice of an older generation of the
// pool is still there (a driver that bumped its pool's generation and
// has not yet deleted, or crashed before deleting, its old slices):
// devices reads only the newest generation (fromSlices), where the
// terminal is gone, but devicePresent reads the byDevice index of every
// slice, the old one included, where it is not. The terminal's Job is
// never deleted, past its 2 s grace, and the Broker is looked at again
// every second (retrySoon) for as long as the old slice stays.
func TestAdversaryStaleSliceGenerationDoesNotBlockDeletes(t *testing.T) {
	h := startHarness(t)
	const pool = "tty-stale"
	publishTerminals(t, h, pool) // generation 1: tty13 and tty14
	l := &looks{}
	h.run(t, []string{pool}, func(c *Controller) { c.afterLook = l.hook })
	br := suspendedJobs("stale")
	br.Spec.Pool, br.Spec.DeletionGraceSeconds = pool, ptr.To[int64](2)
	h.create(t, br)
	if !within(t, 30*time.Second, "a Job per terminal", func() bool { return len(h.jobs(t, "stale")) == 2 }) {
		return
	}
	// Generation 2 of the pool: tty13 alone. Generation 1's slice stays.
	p := discovery.Pool{Name: pool, Resource: "tty", Devices: []spec.DeviceInfo{{ID: "tty13", Resource: "tty", Healthy: true, Capacity: 1}}}
	res := dradevices.Resources("cdi.local", clusterNode, []discovery.Pool{p}, nil)
	for name, rp := range res.Pools {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "n1-"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: "cdi.local", NodeName: ptr.To(clusterNode), Devices: rp.Slices[0].Devices,
			Pool: resourceapi.ResourcePool{Name: name, Generation: 2, ResourceSliceCount: 1}}}
		if _, err := h.Client.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.waitBroker(t, "", "stale", "one terminal selected", func(br *Broker) bool { return br.Status.Devices == 1 })
	n := l.count(h.Namespace + "/stale")
	time.Sleep(15 * time.Second)
	looked := l.count(h.Namespace+"/stale") - n
	jobs := h.jobs(t, "stale")
	t.Logf("in 15 s: %d looks; Jobs of %v", looked, slices.Collect(maps.Keys(jobs)))
	if len(jobs) != 1 {
		t.Errorf("%d Jobs 15 s after tty14 left the pool's newest generation, its grace 2 s; want tty13's alone", len(jobs))
	}
	if looked > 5 {
		t.Errorf("%d looks at the Broker in 15 s, nothing changing", looked)
	}
}

// TestReleaseOfUnfinishedJobStandsOnItsVersion: the letting go of a Job
// deleted before it finished stands on the Job being as the look saw it.
// A Job that finished between that look and the patch (its status
// written by the Job controller) must stay, as the record of its
// result: let go, it would be made anew and run again. Here the Job
// changes in between (a label); the planned patch must fail.
func TestReleaseOfUnfinishedJobStandsOnItsVersion(t *testing.T) {
	h := startHarness(t)
	jobs := h.Client.BatchV1().Jobs(h.Namespace)
	br := suspendedJobs("seen")
	br.UID = "seen-uid"
	want := testPlanner().job(br, unit{name: "seen-job"})
	want.Namespace = h.Namespace
	want.OwnerReferences = nil
	j, err := jobs.Create(t.Context(), want, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = jobs.Patch(context.Background(), j.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := jobs.Delete(t.Context(), j.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen, err := jobs.Get(t.Context(), j.Name, metav1.GetOptions{})
	if err != nil || seen.DeletionTimestamp == nil {
		t.Fatalf("the deleted Job: %v, %+v", err, seen)
	}
	var pl plan
	testPlanner().ensureJob(&pl, br, unit{name: "seen-job"}, seen)
	if len(pl.actions) != 1 || pl.actions[0].op != patch {
		t.Fatalf("the look at a Job deleted before it finished: %v, want the patch letting it go", actionsOf(pl))
	}
	changed := []byte(`{"metadata":{"labels":{"changed":"since"}}}`)
	if _, err := jobs.Patch(t.Context(), j.Name, types.MergePatchType, changed, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = jobs.Patch(t.Context(), j.Name, types.JSONPatchType, pl.actions[0].body, metav1.PatchOptions{})
	if err == nil {
		t.Errorf("the Job, changed since the look, was let go: a Job that finished meanwhile would run again")
	} else if !apierrors.IsInvalid(err) {
		t.Errorf("the patch failed with %v, want Invalid (a test that failed)", err)
	}
}

// policedJob puts in force a ValidatingAdmissionPolicy of the
// namespace's that refuses AnnotationGoneSince on Jobs, as a site's
// policy might, runs the controller with Broker "policed" of grace
// seconds over device policed-cam, and waits for the device's Job and
// for the policy to refuse the annotation on it; false if either wait
// failed (the test has failed then).
func (h *harness) policedJob(t *testing.T, grace int64) bool {
	t.Helper()
	policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "no-gone-since-" + h.Namespace},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: h.Namespace}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}},
				}}}},
			Validations: []admissionv1.Validation{{
				Expression: "!has(object.metadata.annotations) || !('" + AnnotationGoneSince + "' in object.metadata.annotations)",
				Message:    "site policy: no device-gone-since annotations"}},
		}}
	if _, err := h.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(t.Context(), policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	if _, err := h.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.store.set("policed-cam", clusterNode)
	h.run(t, nil, nil)
	h.create(t, jobsBroker("policed", grace))
	if !within(t, 30*time.Second, "the device's Job", func() bool { return len(h.jobs(t, "policed")) == 1 }) {
		return false
	}
	j := h.jobs(t, "policed")["policed-cam"]
	probe, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationGoneSince: "x"}}})
	return within(t, 30*time.Second, "the policy refuses the annotation", func() bool {
		_, err := h.Client.BatchV1().Jobs(h.Namespace).Patch(t.Context(), j.Name, types.MergePatchType, probe,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err)
	})
}

// watchRefusals watches Broker "policed" for 20 s after its device went,
// and returns the PATCHes of Jobs its controller made meanwhile and the
// message of a Created False naming the site policy ("" for none).
func (h *harness) watchRefusals(t *testing.T) (patches int, told string) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if c := condition(h.broker(t, "policed"), ConditionCreated); c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "site policy") {
			told = c.Message
		}
	}
	patches = h.writes.take()["PATCH jobs"]
	t.Logf("in 20 s: %d PATCHes of the Job; Created False said %q", patches, told)
	return patches, told
}

package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/spec"
)

// The tests of issue 45: what the users of Jobs and Deployments expect of
// the controller that makes them for their devices, as they expect it of
// Kubernetes's own controllers. Each runs against a real API server (with
// the Job, Deployment, ReplicaSet, garbage-collector, claim and
// TTL-after-finished controllers and the scheduler: startHarness), one
// per item of the issue, 1 to 12:
//
//  1. TestJobDeletedByItsTTLIsNotRunAgain
//  2. TestStatusWritesRefusedLoseNothing, TestStatusStaysSmallOverManyDevices
//  3. TestUnreadableBrokerIsToldSo
//  4. TestRefusedCreateIsRetriedWithBackoff
//  5. TestPoolWorkloadKeptWhenItsDevicesAreBackAtTheLastLook
//  6. TestTakenNameIsNotAskedForWhileTaken
//  7. TestUnrelatedSpecEditKeepsJobs
//  8. TestReplicasCappedBySlotsPerPod
//  9. TestLongBrokerNamesDoNotCollide
//  10. TestEditedWorkloadsArePutBack
//  11. TestReadySaysWhyNothingRuns
//  12. TestLastLookReadsOneDevice
//
// They read the status through what it had before the fixes too
// (Devices, Active, Completed, Failed, Conditions) and name the Ready
// condition and its reasons as strings, so that they build against the
// controller before the fixes as well, and fail there.

// setIn records that nodes see the shared device id of pool, of
// capacity slots (no nodes: gone from every node).
func (s *fakeStore) setIn(pool, id string, capacity int, nodes ...string) instance.Instance {
	in := instance.Instance{Name: instance.Name(pool, id, "", true), Config: pool, DeviceID: id, Shared: true,
		Capacity: capacity, Nodes: nodes, Properties: map[string]string{"site": "lab"}}
	s.mu.Lock()
	s.instances[in.Name] = in
	s.mu.Unlock()
	s.changes.Notify()
	return in
}

// suspendedJobs is a Broker of a suspended Job per device: the Job
// controller makes no pod of it, so that only the Broker's controller
// and the test change its Jobs.
func suspendedJobs(name string) *Broker {
	br := jobsBroker(name, 60)
	br.Spec.Job.Suspend = ptr.To(true)
	return br
}

// deploymentsBroker is a Broker of a Deployment of replicas pods per
// camera, each pod of containers containers.
func deploymentsBroker(name string, replicas int32, containers int) *Broker {
	tpl := podTemplate()
	tpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	tpl.Spec.Containers = nil
	for i := range containers {
		tpl.Spec.Containers = append(tpl.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "x"})
	}
	return &Broker{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: Spec{Pool: testPool,
		Deployment: &DeploymentTemplate{Replicas: &replicas, Template: tpl}, DeletionGraceSeconds: ptr.To[int64](60)}}
}

// within polls done for at most d, and fails the test, saying what was
// awaited, if it never said yes; it returns whether done said yes.
func within(t *testing.T, d time.Duration, what string, done func() bool) bool {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return done(), nil
	})
	if err != nil {
		t.Errorf("not within %v: %s", d, what)
		return false
	}
	return true
}

// broker reads the Broker name of the harness's namespace; a zero one
// if it cannot.
func (h *harness) broker(t *testing.T, name string) *Broker {
	t.Helper()
	br, err := h.get(t.Context(), "", name)
	if err != nil {
		t.Logf("reading Broker %s: %v", name, err)
		return &Broker{}
	}
	return br
}

// creations is the creations among a watch's records (watchJobs), and
// its failures: every record but the deletions.
func creations(seen []string) []string {
	return slices.DeleteFunc(slices.Clone(seen), func(s string) bool { return strings.HasPrefix(s, "DELETED ") })
}

// TestJobDeletedByItsTTLIsNotRunAgain checks that a Job whose
// ttlSecondsAfterFinished is 0, which the TTL-after-finished controller
// deletes as soon as it completes (before the controller's next look at
// its Broker), is not made again: its last state, deletion included, is
// the record of its result. A Job is run once per device until the
// Broker's template changes; one run again by accident repeats whatever
// it did (a firmware flash, a calibration, a count written to a
// database), and with a TTL would run again after every completion. The
// Jobs made for the device are counted from a watch, until 15 s after
// the TTL controller deleted the first. Issue 45, item 1.
func TestJobDeletedByItsTTLIsNotRunAgain(t *testing.T) {
	h := startHarness(t)
	cam := h.store.set("ttl-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + cam.Name: 2})
	h.run(t, nil, nil)
	seen := h.watchJobs(t, "once")
	br := jobsBroker("once", 60)
	br.Spec.Job.TTLSecondsAfterFinished = ptr.To(int32(0))
	h.create(t, br)
	h.succeed(t, h.waitPods(t, LabelBroker+"=once", 1, "scheduled", scheduled))
	within(t, 30*time.Second, "the TTL-after-finished controller deletes the completed Job", func() bool {
		j, ok := h.jobs(t, "once")["ttl-cam"]
		return !ok || j.DeletionTimestamp != nil
	})
	time.Sleep(15 * time.Second)
	if made := creations(seen()); len(made) != 1 {
		t.Errorf("Jobs made for the device: %v; want one, run once", made)
	}
	if got := h.broker(t, "once").Status; got.Completed != 1 || got.Active != 0 {
		t.Errorf("status %+v, want the device's Job Completed, none Active", got)
	}
}

// TestStatusWritesRefusedLoseNothing runs the controller as a user who
// may do everything it does but write the Brokers' status, as when the
// status is too large for etcd, a webhook refuses it, or the bridge's
// RBAC lacks it, and checks that it forgets nothing it must not: since
// when a device is gone (else every look starts its grace again, and
// the workload of a device gone is never deleted), and that a device's
// Job finished (else that Job, deleted, runs again). Neither can live in
// the status. Issue 45, item 2.
func TestStatusWritesRefusedLoseNothing(t *testing.T) {
	h := startHarness(t)
	cfg := h.withoutStatusWrites(t, "brokers-without-status")
	keep, gone := h.store.set("keep-cam", clusterNode), h.store.set("gone-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + keep.Name: 2, "cdi.local/" + gone.Name: 2})
	l := &looks{}
	startController(t, cfg, h.store, []string{h.Namespace}, nil, func(c *Controller) { c.afterLook = l.hook })
	h.create(t, jobsBroker("unwritten", 2))
	if !within(t, 30*time.Second, "a Job per device", func() bool { return len(h.jobs(t, "unwritten")) == 2 }) {
		return
	}
	if c := h.broker(t, "unwritten").Status.Conditions; len(c) != 0 {
		t.Fatalf("the controller wrote the status %+v, which its user may not", c)
	}
	before := h.jobs(t, "unwritten")
	t.Run("a vanished device's Job goes after its 2 s grace", func(t *testing.T) {
		h.store.set(gone.DeviceID)
		start := time.Now()
		if within(t, 40*time.Second, "the Job of the device gone, whose grace is 2 s, deleted", func() bool {
			_, ok := h.jobs(t, "unwritten")[gone.DeviceID]
			return !ok
		}) {
			t.Logf("the Job of the device gone deleted %v after it went", time.Since(start).Round(100*time.Millisecond))
		}
		if j := h.jobs(t, "unwritten")[keep.DeviceID]; j.UID != before[keep.DeviceID].UID {
			t.Errorf("the Job of the device still there is %s, was %s", j.UID, before[keep.DeviceID].UID)
		}
	})
	t.Run("a finished Job deleted is not run again", func(t *testing.T) {
		h.succeed(t, h.waitPods(t, LabelDevice+"="+keep.Name, 1, "scheduled", scheduled))
		if !within(t, 30*time.Second, "the Job Completed", func() bool {
			j := h.jobs(t, "unwritten")[keep.DeviceID]
			return jobState(&j) == Completed
		}) {
			return
		}
		seen := h.watchJobs(t, "unwritten")
		n := l.count(h.Namespace + "/unwritten")
		job := h.jobs(t, "unwritten")[keep.DeviceID]
		err := h.Client.BatchV1().Jobs(h.Namespace).Delete(t.Context(), job.Name,
			metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		if err != nil {
			t.Fatal(err)
		}
		h.waitLooked(t, l, h.Namespace+"/unwritten", n+1)
		time.Sleep(5 * time.Second)
		if made := creations(seen()); len(made) != 0 {
			t.Errorf("Jobs made after the finished Job was deleted: %v; want none", made)
		}
	})
}

// withoutStatusWrites binds user a ClusterRole of everything the
// controller needs but the update of brokers/status, and returns a
// configuration of h's that impersonates user, once RBAC lets user
// list the Jobs.
func (h *harness) withoutStatusWrites(t *testing.T, user string) *rest.Config {
	t.Helper()
	all, read := []string{"get", "list", "watch", "create", "update", "patch", "delete"}, []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{Resource.Group}, Resources: []string{"brokers"}, Verbs: read},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: all},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: all},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaimtemplates"}, Verbs: all},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "deviceclasses"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: read},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	}}
	if _, err := h.Client.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	if _, err := h.Client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(h.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.BatchV1().Jobs(h.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("RBAC never let %s list Jobs: %v", user, err)
	}
	return cfg
}

// TestStatusStaysSmallOverManyDevices checks that a Broker over 300
// devices is about as small as over one. A status that lists every
// workload grows with the devices until the API server refuses to store
// it (2 MiB, at about 10,000 devices), and is rewritten whole by every
// look that changes one of them. Issue 45, item 2 (BenchmarkBrokers
// measures it at 10,000 devices).
func TestStatusStaysSmallOverManyDevices(t *testing.T) {
	h := startHarness(t)
	const devices, most = 300, 8 << 10
	for i := range devices {
		h.store.set(fmt.Sprintf("cam-%03d", i), clusterNode)
	}
	h.run(t, nil, nil)
	h.create(t, suspendedJobs("many"))
	h.waitBroker(t, "", "many", "every Job made", func(br *Broker) bool {
		return br.Status.Devices == devices && condition(br, ConditionCreated).Status == metav1.ConditionTrue &&
			br.Status.ObservedGeneration == br.Generation
	})
	u, err := h.dyn.Resource(Resource).Namespace(h.Namespace).Get(t.Context(), "many", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(u.Object["status"])
	t.Logf("the Broker over %d devices: %d bytes, its status %d", devices, len(data), len(status))
	if len(data) > most {
		t.Errorf("the Broker over %d devices is %d bytes (its status %d), want at most %d: its status grows with its devices",
			devices, len(data), len(status), most)
	}
	if n := len(h.jobs(t, "many")); n != devices {
		t.Errorf("%d Jobs, want %d", n, devices)
	}
}

// TestUnreadableBrokerIsToldSo checks that a Broker the CRD takes (its
// pod template keeps unknown fields) but that cannot be read as a Broker
// (its containers a string) is told so where its user looks, in its
// status (Accepted False, Invalid, with the error), not in the bridge's
// log alone, where it is a Broker that silently does nothing; and that
// once fixed it is acted on. Issue 45, item 3.
func TestUnreadableBrokerIsToldSo(t *testing.T) {
	h := startHarness(t)
	h.store.set("garbled-cam", clusterNode)
	h.run(t, nil, nil)
	r := h.dyn.Resource(Resource).Namespace(h.Namespace)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Resource.GroupVersion().String(), "kind": Kind,
		"metadata": map[string]any{"name": "garbled"},
		"spec": map[string]any{"pool": testPool, "job": map[string]any{
			"template": map[string]any{"spec": map[string]any{"containers": "camera-reader", "restartPolicy": "Never"}}}},
	}}
	if _, err := r.Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the CRD refuses the Broker, which this test needs it to take: %v", err)
	}
	var accepted map[string]any
	told := within(t, 30*time.Second, "Accepted False, Invalid, with a message", func() bool {
		accepted = unstructuredCondition(t, h, "garbled", ConditionAccepted)
		return accepted["status"] == "False" && accepted["reason"] == ReasonInvalid && accepted["message"] != ""
	})
	if told {
		t.Logf("Accepted: %s", accepted["message"])
	} else {
		t.Logf("Accepted: %v", accepted)
	}
	if n := len(h.jobs(t, "garbled")); n != 0 {
		t.Errorf("%d Jobs of the Broker that cannot be read", n)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := r.Get(t.Context(), "garbled", metav1.GetOptions{})
		if err != nil {
			return err
		}
		containers := []any{map[string]any{"name": "reader", "image": "x"}}
		if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "job", "template", "spec", "containers"); err != nil {
			return err
		}
		_, err = r.Update(t.Context(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	within(t, 30*time.Second, "once fixed, Accepted and its Job made", func() bool {
		return unstructuredCondition(t, h, "garbled", ConditionAccepted)["status"] == "True" && len(h.jobs(t, "garbled")) == 1
	})
}

// unstructuredCondition is the condition typ of the Broker name, read
// without making a Broker of it; nil if it has none.
func unstructuredCondition(t *testing.T, h *harness, name, typ string) map[string]any {
	u, err := h.dyn.Resource(Resource).Namespace(h.Namespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// TestRefusedCreateIsRetriedWithBackoff checks that a create refused
// for a reason that passes (here a quota of one Job, then raised; as
// well a webhook that was down, or a 5xx) is retried with backoff, as
// the workqueue retries the Job controller's writes: the second
// device's Job is made seconds after the quota allows it, not at the
// ten-minute resync. Issue 45, item 4.
func TestRefusedCreateIsRetriedWithBackoff(t *testing.T) {
	h := startHarness(t)
	h.store.set("quota-a", clusterNode)
	h.store.set("quota-b", clusterNode)
	jobs := corev1.ResourceName("count/jobs.batch")
	quotas := h.Client.CoreV1().ResourceQuotas(h.Namespace)
	q, err := quotas.Create(t.Context(), &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "jobs"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{jobs: resource.MustParse("1")}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No quota controller runs here: the test says what is used, and the
	// quota admission counts the creates from there.
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{jobs: resource.MustParse("0")}}
	if _, err := quotas.UpdateStatus(t.Context(), q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.run(t, nil, nil)
	h.create(t, suspendedJobs("quota"))
	if !within(t, 30*time.Second, "one Job made, the other refused: Created False", func() bool {
		br := h.broker(t, "quota")
		return len(h.jobs(t, "quota")) == 1 && condition(br, ConditionCreated).Status == metav1.ConditionFalse
	}) {
		return
	}
	t.Logf("Created: %s", condition(h.broker(t, "quota"), ConditionCreated).Message)
	time.Sleep(3 * time.Second)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		q, err := quotas.Get(t.Context(), "jobs", metav1.GetOptions{})
		if err != nil {
			return err
		}
		q.Spec.Hard[jobs], q.Status.Hard[jobs] = resource.MustParse("2"), resource.MustParse("2")
		if q, err = quotas.Update(t.Context(), q, metav1.UpdateOptions{}); err != nil {
			return err
		}
		q.Status.Hard[jobs] = resource.MustParse("2")
		_, err = quotas.UpdateStatus(t.Context(), q, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	if within(t, 30*time.Second, "the second Job made once the quota allows it", func() bool {
		return len(h.jobs(t, "quota")) == 2
	}) {
		t.Logf("the second Job made %v after the quota allowed it", time.Since(raised).Round(100*time.Millisecond))
	}
	within(t, 10*time.Second, "Created True", func() bool {
		return condition(h.broker(t, "quota"), ConditionCreated).Status == metav1.ConditionTrue
	})
}

// TestPoolWorkloadKeptWhenItsDevicesAreBackAtTheLastLook checks that the
// Pool strategy's workload, whose devices have been gone past the
// grace, is deleted only if a last look just before the delete finds
// them still gone, as a device's workload is. The controller is paused
// just before the delete (a long look, or a leader that lost its lease
// and has not noticed yet), the devices come back, and it goes on: it
// must delete nothing, or the pool's Job runs again and its Deployment
// restarts. Issue 45, item 5.
func TestPoolWorkloadKeptWhenItsDevicesAreBackAtTheLastLook(t *testing.T) {
	h := startHarness(t)
	const pool = "pool-five"
	for _, id := range []string{"p1", "p2"} {
		h.store.setIn(pool, id, 1, clusterNode)
	}
	br := suspendedJobs("pair")
	br.Spec.Pool, br.Spec.Strategy, br.Spec.Count, br.Spec.DeletionGraceSeconds = pool, Pool, 2, ptr.To[int64](1)
	paused, release := make(chan action, 1), make(chan struct{})
	var pause, unpause sync.Once
	l := &looks{}
	h.run(t, nil, func(c *Controller) {
		c.afterLook = l.hook
		c.beforeWrite = func(a action) {
			if a.op != remove || a.obj.GetLabels()[LabelBroker] != "pair" {
				return
			}
			pause.Do(func() {
				paused <- a
				select {
				case <-release:
				case <-time.After(clusterWait):
				}
			})
		}
	})
	t.Cleanup(func() { unpause.Do(func() { close(release) }) })
	h.create(t, br)
	var before batchv1.Job
	if !within(t, 30*time.Second, "the pool's Job", func() bool {
		j, err := h.Client.BatchV1().Jobs(h.Namespace).Get(t.Context(), workloadName("pair", ""), metav1.GetOptions{})
		if err == nil {
			before = *j
		}
		return err == nil
	}) {
		return
	}
	seen := h.watchJobs(t, "pair")
	for _, id := range []string{"p1", "p2"} {
		h.store.setIn(pool, id, 1)
	}
	select {
	case a := <-paused:
		t.Logf("paused before: %s", a)
	case <-time.After(30 * time.Second):
		t.Fatal("the controller never went to delete the pool's Job, its devices gone past the grace")
	}
	for _, id := range []string{"p1", "p2"} {
		h.store.setIn(pool, id, 1, clusterNode)
	}
	n := l.count(h.Namespace + "/pair")
	unpause.Do(func() { close(release) })
	h.waitLooked(t, l, h.Namespace+"/pair", n+2)
	time.Sleep(2 * time.Second)
	after, err := h.Client.BatchV1().Jobs(h.Namespace).Get(t.Context(), before.Name, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("the pool's Job: %v", err)
	case after.UID != before.UID || after.DeletionTimestamp != nil:
		t.Errorf("the pool's Job is %s (deleted %v), was %s: want the same, not deleted", after.UID, after.DeletionTimestamp, before.UID)
	}
	if s := seen(); len(s) != 0 {
		t.Errorf("the pool's Job deleted or made while its devices were back: %v", s)
	}
}

// TestTakenNameIsNotAskedForWhileTaken checks that a workload's name
// that an object the Broker does not own has is reported (Created
// False, NameTaken) and not asked for while the controller's informers
// show that object: a POST that must fail, every 10 s for ever and for
// each such name, is load on the API server for nothing. Once the
// object goes, the workload is made within seconds. Issue 45, item 6.
func TestTakenNameIsNotAskedForWhileTaken(t *testing.T) {
	h := startHarness(t)
	cam := h.store.set("taken-cam", clusterNode)
	other := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: workloadName("taken", cam.Name)}, Spec: *suspendedJobs("x").Spec.Job.DeepCopy()}
	other, err := h.Client.BatchV1().Jobs(h.Namespace).Create(t.Context(), other, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.run(t, nil, nil)
	h.writes.take()
	h.create(t, suspendedJobs("taken"))
	start := time.Now()
	within(t, 30*time.Second, "Created False, NameTaken", func() bool {
		return condition(h.broker(t, "taken"), ConditionCreated).Reason == ReasonNameTaken
	})
	time.Sleep(time.Until(start.Add(30 * time.Second)))
	if posts := h.writes.take()["POST jobs"]; posts > 1 {
		t.Errorf("%d POSTs of a Job in 30 s, whose name another Job has; want at most 1", posts)
	}
	if j, err := h.Client.BatchV1().Jobs(h.Namespace).Get(t.Context(), other.Name, metav1.GetOptions{}); err != nil ||
		j.UID != other.UID || len(j.OwnerReferences) != 0 {
		t.Errorf("the other Job: %v, %+v", err, j.ObjectMeta)
	}
	if err := h.Client.BatchV1().Jobs(h.Namespace).Delete(t.Context(), other.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	if within(t, 15*time.Second, "the Broker's Job made once the name is free", func() bool {
		j, ok := h.jobs(t, "taken")[cam.DeviceID]
		return ok && j.UID != other.UID
	}) {
		t.Logf("the Job made %v after the name was free", time.Since(freed).Round(100*time.Millisecond))
	}
}

// TestUnrelatedSpecEditKeepsJobs checks that a change of the Broker that
// changes no Job (its deletionGraceSeconds, 60 to 300) neither kills a
// running Job nor runs a finished one again: a Job is made anew only
// when what makes it changes, not whenever the Broker's generation
// does. The Jobs are watched while the edit is looked at. Issue 45,
// item 7.
func TestUnrelatedSpecEditKeepsJobs(t *testing.T) {
	h := startHarness(t)
	done, running := h.store.set("edit-done", clusterNode), h.store.set("edit-running", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + done.Name: 2, "cdi.local/" + running.Name: 2})
	l := &looks{}
	h.run(t, nil, func(c *Controller) { c.afterLook = l.hook })
	h.create(t, jobsBroker("edited", 60))
	pods := h.waitPods(t, LabelBroker+"=edited", 2, "scheduled", scheduled)
	h.succeed(t, slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Labels[LabelDevice] != done.Name }))
	h.waitBroker(t, "", "edited", "one Completed", func(br *Broker) bool { return br.Status.Completed == 1 })
	before := h.jobs(t, "edited")
	seen := h.watchJobs(t, "edited")
	h.update(t, "edited", func(s *Spec) { s.DeletionGraceSeconds = ptr.To[int64](300) })
	h.waitBroker(t, "", "edited", "the edit looked at", func(br *Broker) bool { return br.Status.ObservedGeneration == 2 })
	n := l.count(h.Namespace + "/edited")
	time.Sleep(3 * time.Second)
	h.waitLooked(t, l, h.Namespace+"/edited", n)
	h.checkSameJobs(t, before, h.jobs(t, "edited"))
	if s := seen(); len(s) != 0 {
		t.Errorf("Jobs deleted or made after an edit of the grace alone: %v", s)
	}
	if j := h.jobs(t, "edited")[running.DeviceID]; jobState(&j) == Completed || j.DeletionTimestamp != nil {
		t.Errorf("the running Job: %s, deleted %v; want it running", jobState(&j), j.DeletionTimestamp)
	}
}

// TestReplicasCappedBySlotsPerPod checks that a Deployment runs no more
// pods than its device has slots for all their containers, each of
// which takes one: on a device of 2 slots, a Broker's 2 replicas of a
// pod of two containers are 1, whose pod the scheduler places, where 2
// would leave the second pod unschedulable for ever. And the status
// claims no more than runs: no workload Active until its pod is
// available, then one. Issue 45, item 8.
func TestReplicasCappedBySlotsPerPod(t *testing.T) {
	h := startHarness(t)
	cam := h.store.set("twin-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + cam.Name: 2})
	h.run(t, nil, nil)
	h.create(t, deploymentsBroker("twin", 2, 2))
	name := workloadName("twin", cam.Name)
	var d *appsv1.Deployment
	if !within(t, 30*time.Second, "the device's Deployment", func() bool {
		got, err := h.Client.AppsV1().Deployments(h.Namespace).Get(t.Context(), name, metav1.GetOptions{})
		d = got
		return err == nil
	}) {
		return
	}
	if r := ptr.Deref(d.Spec.Replicas, 1); r != 1 {
		t.Errorf("the Deployment has %d replicas of 2 containers, on a device of 2 slots; want 1", r)
	}
	var pods []corev1.Pod
	list := func() []corev1.Pod {
		l, err := h.Client.CoreV1().Pods(h.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelBroker + "=twin"})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	within(t, 30*time.Second, "its pod scheduled", func() bool {
		pods = list()
		return len(pods) > 0 && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !scheduled(&p) })
	})
	time.Sleep(3 * time.Second)
	pods = list()
	var unscheduled []string
	for _, p := range pods {
		if !scheduled(&p) {
			unscheduled = append(unscheduled, p.Name)
		}
	}
	if len(pods) != 1 || len(unscheduled) != 0 {
		t.Errorf("%d pods, unscheduled %v; want one, scheduled", len(pods), unscheduled)
	}
	br := h.waitBroker(t, "", "twin", "looked at", func(br *Broker) bool { return br.Status.Devices == 1 })
	if br.Status.Active != 0 || condition(br, "Ready").Status == metav1.ConditionTrue {
		t.Errorf("no pod runs yet, and the status is %+v", br.Status)
	}
	for _, p := range pods[:min(len(pods), 1)] {
		h.runPod(t, p)
	}
	within(t, 30*time.Second, "the status counts the Deployment Active once its pod runs", func() bool {
		return h.broker(t, "twin").Status.Active == 1
	})
}

// runPod plays the kubelet: the pod runs and is ready.
func (h *harness) runPod(t *testing.T, p corev1.Pod) {
	t.Helper()
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	p.Status.Conditions = slices.DeleteFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady || c.Type == corev1.ContainersReady
	})
	p.Status.Conditions = append(p.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now})
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	if _, err := h.Client.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), &p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLongBrokerNamesDoNotCollide checks that two Brokers whose names
// share their first 52 characters (the room before a device's hash in a
// workload's name) both get their Jobs for the same device: were the
// names cut alone, the second Broker's would be the first's, and its
// creates would fail for ever. Issue 45, item 9.
func TestLongBrokerNamesDoNotCollide(t *testing.T) {
	h := startHarness(t)
	const prefix = "a-broker-of-cameras-whose-name-is-longer-than-the-room"
	h.store.set("long-cam", clusterNode)
	h.run(t, nil, nil)
	names := []string{prefix + "-first", prefix + "-other"}
	for _, name := range names {
		h.create(t, suspendedJobs(name))
	}
	within(t, 30*time.Second, "a Job for each Broker", func() bool {
		return len(h.jobs(t, names[0])) == 1 && len(h.jobs(t, names[1])) == 1
	})
	for _, name := range names {
		br := h.broker(t, name)
		if c := condition(br, ConditionCreated); c.Status != metav1.ConditionTrue {
			t.Errorf("Broker %s: Created %+v", name, c)
		}
		for _, j := range h.jobs(t, name) {
			t.Logf("Broker %s: Job %s", name, j.Name)
		}
	}
}

// TestEditedWorkloadsArePutBack checks that a user's edit of a
// Deployment or Service the controller made (the Deployment's replicas
// and image and its pods' device limits; the Service's port) is undone
// within seconds, as the Deployment controller undoes an edit of its
// ReplicaSets: the Broker says what runs, and a Deployment scaled past
// its device's slots leaves pods unschedulable for ever. Issue 45,
// item 10.
func TestEditedWorkloadsArePutBack(t *testing.T) {
	h := startHarness(t)
	cam := h.store.set("edited-cam", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + cam.Name: 2})
	h.run(t, nil, nil)
	br := deploymentsBroker("restored", 1, 1)
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8554}}}}
	h.create(t, br)
	name := workloadName("restored", cam.Name)
	device := corev1.ResourceName("cdi.local/" + cam.Name)
	deps, svcs := h.Client.AppsV1().Deployments(h.Namespace), h.Client.CoreV1().Services(h.Namespace)
	if !within(t, 30*time.Second, "the Deployment and its Service", func() bool {
		_, errD := deps.Get(t.Context(), name, metav1.GetOptions{})
		_, errS := svcs.Get(t.Context(), name, metav1.GetOptions{})
		return errD == nil && errS == nil
	}) {
		return
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deps.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To(int32(9))
		c := &d.Spec.Template.Spec.Containers[0]
		c.Image = "edited"
		delete(c.Resources.Limits, device)
		delete(c.Resources.Requests, device)
		_, err = deps.Update(t.Context(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := svcs.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Ports = []corev1.ServicePort{{Port: 9999, TargetPort: intstr.FromInt32(9999), Protocol: corev1.ProtocolTCP}}
		_, err = svcs.Update(t.Context(), s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	var d *appsv1.Deployment
	if within(t, 20*time.Second, "the Deployment back to 1 replica, image x, the device's limit", func() bool {
		got, err := deps.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		d = got
		c := d.Spec.Template.Spec.Containers[0]
		q := c.Resources.Limits[device]
		return ptr.Deref(d.Spec.Replicas, 1) == 1 && c.Image == "x" && q.Value() == 1
	}) {
		t.Logf("the Deployment put back %v after the edit", time.Since(edited).Round(100*time.Millisecond))
	} else if d != nil {
		t.Logf("the Deployment: replicas %d, containers %+v", ptr.Deref(d.Spec.Replicas, 1), d.Spec.Template.Spec.Containers)
	}
	var s *corev1.Service
	if within(t, 20*time.Second, "the Service back to port 8554", func() bool {
		got, err := svcs.Get(t.Context(), name, metav1.GetOptions{})
		s = got
		return err == nil && len(s.Spec.Ports) == 1 && s.Spec.Ports[0].Port == 8554
	}) {
		t.Logf("the Service put back %v after the edit", time.Since(edited).Round(100*time.Millisecond))
	} else if s != nil {
		t.Logf("the Service's ports: %+v", s.Spec.Ports)
	}
}

// TestReadySaysWhyNothingRuns checks that a Broker under which nothing
// runs says why, in its Ready condition's reason, where it said
// Accepted and Created over zero devices: no node serves its pool
// (NoSuchPool), its selector picks none of the pool's devices
// (NoDeviceSelected), its count is above the pool's devices
// (NotEnoughDevices), the DeviceClass its DRA pool's claims request does
// not exist (NoDeviceClass), a pod's containers take more slots than its
// device has (TooManyContainers), its pods do not run yet (Pending).
// Issue 45, item 11.
func TestReadySaysWhyNothingRuns(t *testing.T) {
	h := startHarness(t)
	h.store.set("reason-cam", clusterNode)
	for _, id := range []string{"e1", "e2"} {
		h.store.setIn("pool-eleven", id, 1, clusterNode)
	}
	publishTerminals(t, h, "tty-reasons")
	h.run(t, []string{"tty-reasons"}, nil)
	cases := map[string]*Broker{}
	add := func(reason string, br *Broker) { cases[reason] = br; h.create(t, br) }
	br := suspendedJobs("no-pool")
	br.Spec.Pool = "no-such-pool"
	add("NoSuchPool", br)
	br = suspendedJobs("none-selected")
	br.Spec.Selector = &Selector{DeviceIDs: []string{"no-such-id"}}
	add("NoDeviceSelected", br)
	br = suspendedJobs("too-few")
	br.Spec.Pool, br.Spec.Strategy, br.Spec.Count = "pool-eleven", Pool, 3
	add("NotEnoughDevices", br)
	br = suspendedJobs("no-class")
	br.Spec.Pool, br.Spec.DeviceClassName = "tty-reasons", "no-such-class"
	add("NoDeviceClass", br)
	add("TooManyContainers", deploymentsBroker("too-many-containers", 1, 3))
	add("Pending", jobsBroker("pending", 60))
	deadline := time.Now().Add(30 * time.Second)
	for _, reason := range sortedKeys(cases) {
		t.Run(reason, func(t *testing.T) {
			var ready metav1.Condition
			err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, max(time.Until(deadline), time.Second), true,
				func(context.Context) (bool, error) {
					ready = condition(h.broker(t, cases[reason].Name), "Ready")
					return ready.Reason == reason, nil
				})
			if err != nil || ready.Status != metav1.ConditionFalse || ready.Message == "" {
				t.Errorf("Broker %s: Ready %+v; want False, %s, with a message", cases[reason].Name, ready, reason)
				return
			}
			t.Logf("Ready False, %s: %s", reason, ready.Message)
		})
	}
}

// publishTerminals publishes two terminals of node n1 of the DRA pool,
// as the bridge does.
func publishTerminals(t *testing.T, h *harness, pool string) {
	t.Helper()
	p := discovery.Pool{Name: pool, Resource: "tty", Devices: []spec.DeviceInfo{
		{ID: "tty13", Resource: "tty", Healthy: true, Capacity: 1}, {ID: "tty14", Resource: "tty", Healthy: true, Capacity: 1}}}
	res := dradevices.Resources("cdi.local", clusterNode, []discovery.Pool{p}, nil)
	for name, rp := range res.Pools {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "n1-"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: "cdi.local", NodeName: ptr.To(clusterNode), Devices: rp.Slices[0].Devices,
			Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}}}
		if _, err := h.Client.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// countingStore is the Instance store with the bridge's store's Get of
// one Instance, which counts its Gets and the Lists made while the
// controller writes (its last looks before deletes).
type countingStore struct {
	*fakeStore
	mu                 sync.Mutex
	gets, writingLists int
}

func (s *countingStore) List(ctx context.Context) ([]instance.Instance, error) {
	if calledFrom(".(*run).apply") {
		s.mu.Lock()
		s.writingLists++
		s.mu.Unlock()
	}
	return s.fakeStore.List(ctx)
}

// Get is the Instance name, nil if there is none.
func (s *countingStore) Get(name string) (*instance.Instance, error) {
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	s.fakeStore.mu.Lock()
	defer s.fakeStore.mu.Unlock()
	in, ok := s.instances[name]
	if !ok {
		return nil, nil
	}
	return &in, nil
}

func (s *countingStore) counts() (gets, writingLists int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets, s.writingLists
}

// calledFrom says whether a function whose name ends with suffix is
// among the callers.
func calledFrom(suffix string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, suffix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestLastLookReadsOneDevice checks that the last look for a vanished
// device before its workload's delete reads that device alone (the
// store's Get), not every Instance of every pool (a List, each Instance
// converted): at 10,000 Instances that is 300 ms a delete, and 500
// deletes take minutes. 30 devices vanish at once; their Jobs go
// without a List while the controller writes. Issue 45, item 12.
func TestLastLookReadsOneDevice(t *testing.T) {
	h := startHarness(t)
	const devices = 30
	store := &countingStore{fakeStore: h.store}
	for i := range devices {
		store.set(fmt.Sprintf("look-%02d", i), clusterNode)
	}
	startController(t, h.cfg, store, []string{h.Namespace}, nil, nil)
	br := suspendedJobs("looked")
	br.Spec.DeletionGraceSeconds = ptr.To[int64](1)
	h.create(t, br)
	if !within(t, 60*time.Second, "a Job per device", func() bool { return len(h.jobs(t, "looked")) == devices }) {
		return
	}
	gets0, lists0 := store.counts()
	for i := range devices {
		store.set(fmt.Sprintf("look-%02d", i))
	}
	within(t, 60*time.Second, "every Job deleted", func() bool { return len(h.jobs(t, "looked")) == 0 })
	gets, lists := store.counts()
	t.Logf("deleting %d vanished devices' Jobs: %d Gets, %d Lists while writing", devices, gets-gets0, lists-lists0)
	if lists-lists0 > 0 {
		t.Errorf("deleting %d vanished devices' Jobs listed every Instance %d times; want none, a Get per device", devices, lists-lists0)
	}
	if gets-gets0 < devices {
		t.Errorf("%d Gets for %d deletes; want one per device at least", gets-gets0, devices)
	}
}

// Defects the tests above led to, besides the items: each test
// below fails against the controller as it is.

// TestVanishedDeviceGraceKeptWhileStatusFails: the grace of a vanished
// device ends when it says, however long the Broker's status writes
// have failed: the look that fails plans the end of the grace, and the
// retry with backoff, which grows with every failure up to 5 minutes,
// must not stand in for it. Here ten looks have failed (the backoff is
// over 5 minutes) when the device goes; its grace is 2 s.
func TestVanishedDeviceGraceKeptWhileStatusFails(t *testing.T) {
	h := startHarness(t)
	cfg := h.withoutStatusWrites(t, "brokers-without-status")
	gone := h.store.set("gone-cam", clusterNode)
	l := &looks{}
	startController(t, cfg, h.store, []string{h.Namespace}, nil, func(c *Controller) { c.afterLook = l.hook })
	br := suspendedJobs("failing")
	br.Spec.DeletionGraceSeconds = ptr.To[int64](2)
	h.create(t, br)
	if !within(t, 30*time.Second, "the device's Job", func() bool { return len(h.jobs(t, "failing")) == 1 }) {
		return
	}
	// Each change of the Job is a look, and each look fails.
	key := h.Namespace + "/failing"
	for i := 0; l.count(key) < 10; i++ {
		n := l.count(key)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			j := h.jobs(t, "failing")[gone.DeviceID]
			j.Labels["touched"] = fmt.Sprint(i)
			_, err := h.Client.BatchV1().Jobs(h.Namespace).Update(t.Context(), &j, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		h.waitLooked(t, l, key, n+1)
	}
	h.store.set(gone.DeviceID)
	start := time.Now()
	if within(t, 20*time.Second, "the Job of the device gone, whose grace is 2 s, deleted", func() bool {
		return len(h.jobs(t, "failing")) == 0
	}) {
		t.Logf("deleted %v after the device went", time.Since(start).Round(100*time.Millisecond))
	}
}

// TestReplacedJobNotReportedAsNameTaken: a Job made anew for a changed
// template is deleted and made in one look; its name is the old Job's,
// which the Broker owns. That must not be reported as a name another
// object has (Created False, NameTaken, and a Warning Event saying the
// Broker does not own it): the user would look for an object that is
// not there.
func TestReplacedJobNotReportedAsNameTaken(t *testing.T) {
	h := startHarness(t)
	h.store.set("replaced-cam", clusterNode)
	h.run(t, nil, nil)
	h.create(t, suspendedJobs("replaced"))
	h.waitBroker(t, "", "replaced", "Created", func(br *Broker) bool {
		return len(h.jobs(t, "replaced")) == 1 && condition(br, ConditionCreated).Status == metav1.ConditionTrue
	})
	before := h.jobs(t, "replaced")["replaced-cam"]
	var reasons []string
	w, err := h.dyn.Resource(Resource).Namespace(h.Namespace).Watch(t.Context(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				if br, err := fromUnstructured(u); err == nil {
					reasons = append(reasons, condition(br, ConditionCreated).Reason)
				}
			}
		}
	}()
	h.update(t, "replaced", func(s *Spec) { s.Job.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "RUN", Value: "2"}} })
	within(t, 30*time.Second, "the Job made anew", func() bool {
		j, ok := h.jobs(t, "replaced")["replaced-cam"]
		return ok && j.UID != before.UID
	})
	time.Sleep(2 * time.Second)
	w.Stop()
	<-done
	if slices.Contains(reasons, ReasonNameTaken) {
		t.Errorf("the Broker's Created reasons while its Job was made anew: %v; want no NameTaken", reasons)
	}
	events, err := h.Client.EventsV1().Events(h.Namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == ReasonNameTaken {
			t.Errorf("Event %s %s: %s", e.Type, e.Reason, e.Note)
		}
	}
}

package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/spec"
)

// TestCluster runs the controller against a real API server, with the
// real Job, Deployment, ReplicaSet, claim and garbage-collector
// controllers and the real scheduler, on one Node that has the cameras'
// resources; the test plays the kubelet (a pod it says succeeded).
func TestCluster(t *testing.T) {
	h := startHarness(t)
	lobby, dock := h.store.set("lobby", clusterNode), h.store.set("dock", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + lobby.Name: 2, "cdi.local/" + dock.Name: 2, "cdi.local/" + testPool: 2})
	stop := h.run(t, nil, nil)
	t.Run("a Job per device: completed, not run again, run again when the Broker changes", func(t *testing.T) { testJobs(t, h) })
	t.Run("a vanished device's Job goes after the grace, and comes back with it", func(t *testing.T) { testVanish(t, h) })
	t.Run("a new leader writes nothing", func(st *testing.T) {
		stop()
		stop = testRestart(st, t, h)
	})
	t.Run("a Deployment per device, at most its capacity, rolled when the template changes, with Services", func(t *testing.T) {
		testDeployments(t, h)
	})
	t.Run("one Deployment over two devices of the pool", func(t *testing.T) { testPoolWorkload(t, h) })
	t.Run("a Broker in a namespace not served is told so", func(t *testing.T) { testNotServed(t, h) })
	t.Run("a workload that cannot be made is reported, and its name left to its owner", func(t *testing.T) { testCreateFailed(t, h) })
	stop()
	t.Run("leaders interleaved: nothing made twice, nothing deleted that is back", func(t *testing.T) { testFailover(t, h) })
	t.Run("a Job per terminal through DRA, each claim selecting its terminal", func(t *testing.T) { testDRA(t, h) })
}

// jobsBroker is a Broker of a Job per camera whose devices keep their
// Jobs for grace seconds once gone.
func jobsBroker(name string, grace int64) *Broker {
	tpl := podTemplate()
	tpl.Spec.Containers = tpl.Spec.Containers[:1]
	return &Broker{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: Spec{Pool: testPool, Job: &batchv1.JobSpec{Template: tpl, BackoffLimit: ptr.To(int32(0))}, DeletionGraceSeconds: &grace}}
}

// jobs lists the Jobs of the Broker named broker, by device ID.
func (h *harness) jobs(t *testing.T, broker string) map[string]batchv1.Job {
	t.Helper()
	l, err := h.Client.BatchV1().Jobs(h.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelBroker + "=" + broker})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]batchv1.Job{}
	for _, j := range l.Items {
		out[h.deviceID(t, j.Labels[LabelDevice])] = j
	}
	return out
}

// deviceID is the camera ID of an Instance name.
func (h *harness) deviceID(t *testing.T, key string) string {
	all, _ := h.store.List(t.Context())
	for _, in := range all {
		if in.Name == key {
			return in.DeviceID
		}
	}
	return "?" + key
}

// states is the states of the Broker's workloads, by device ID, as
// their Jobs and Deployments say.
func (h *harness) states(t *testing.T, broker string) map[string]State {
	t.Helper()
	out := map[string]State{}
	for id, j := range h.jobs(t, broker) {
		out[id] = jobState(&j)
	}
	l, err := h.Client.AppsV1().Deployments(h.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelBroker + "=" + broker})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range l.Items {
		out[h.deviceID(t, d.Labels[LabelDevice])] = deploymentState(&d)
	}
	return out
}

// allStates is a wait for the Broker's workloads of ids, and no other,
// to be in state want.
func (h *harness) allStates(t *testing.T, broker string, want State, ids ...string) func(*Broker) bool {
	return func(*Broker) bool {
		s := h.states(t, broker)
		if len(s) != len(ids) {
			return false
		}
		for _, id := range ids {
			if s[id] != want {
				return false
			}
		}
		return true
	}
}

// checkJobRequests checks that each pod of the Broker asks for exactly
// its device's own resource, one per container.
func checkJobRequests(t *testing.T, pods []corev1.Pod) {
	for _, p := range pods {
		want := corev1.ResourceName("cdi.local/" + p.Labels[LabelDevice])
		for _, c := range p.Spec.Containers {
			if q := c.Resources.Limits[want]; q.Value() != 1 || len(c.Resources.Limits) != 1 {
				t.Errorf("pod %s container %s limits %v, want %s: 1", p.Name, c.Name, c.Resources.Limits, want)
			}
		}
	}
}

func testJobs(t *testing.T, h *harness) {
	h.create(t, jobsBroker("inventory", vanishGrace))
	h.waitBroker(t, "", "inventory", "a Job per camera", h.allStates(t, "inventory", Pending, "lobby", "dock"))
	jobs := h.jobs(t, "inventory")
	for id, j := range jobs {
		ref := metav1.GetControllerOf(&j)
		if ref == nil || ref.Kind != Kind || ref.Name != "inventory" || j.Labels[LabelPool] != testPool ||
			j.Annotations[AnnotationHash] == "" || !slices.Contains(j.Finalizers, FinalizerResult) {
			t.Errorf("Job of %s: owner %+v, labels %v, annotations %v, finalizers %v", id, ref, j.Labels, j.Annotations, j.Finalizers)
		}
	}
	pods := h.waitPods(t, LabelBroker+"=inventory", 2, "scheduled", scheduled)
	checkJobRequests(t, pods)
	h.succeed(t, pods)
	br := h.waitBroker(t, "", "inventory", "both Completed", func(br *Broker) bool { return br.Status.Completed == 2 })
	if br.Status.Devices != 2 || br.Status.Workloads != 2 || condition(br, ConditionCreated).Status != metav1.ConditionTrue ||
		condition(br, ConditionReady).Status != metav1.ConditionTrue {
		t.Errorf("status %+v", br.Status)
	}
	// Deleted as ttlSecondsAfterFinished does (in the foreground): kept
	// as the record of their result, not run again.
	for _, j := range jobs {
		if err := h.Client.BatchV1().Jobs(h.Namespace).Delete(t.Context(), j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
			t.Fatal(err)
		}
	}
	h.update(t, "inventory", func(s *Spec) { s.DeletionGraceSeconds = ptr.To[int64](vanishGrace + 1) })
	h.waitBroker(t, "", "inventory", "a look at generation 2", func(br *Broker) bool { return br.Status.ObservedGeneration == 2 })
	h.update(t, "inventory", func(s *Spec) { s.DeletionGraceSeconds = ptr.To[int64](vanishGrace) })
	h.waitBroker(t, "", "inventory", "a look at generation 3", func(br *Broker) bool { return br.Status.ObservedGeneration == 3 })
	for id, j := range h.jobs(t, "inventory") {
		if j.UID != jobs[id].UID || j.DeletionTimestamp == nil || jobState(&j) != Completed {
			t.Errorf("Job of %s after its deletion and two spec edits: UID %s (before %s), deleted %v, %s; want the same, Completed",
				id, j.UID, jobs[id].UID, j.DeletionTimestamp, jobState(&j))
		}
	}
	h.update(t, "inventory", func(s *Spec) {
		s.Job.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "RUN", Value: "2"}}
	})
	h.waitBroker(t, "", "inventory", "run again for the changed template", func(*Broker) bool {
		now := h.jobs(t, "inventory")
		return len(now) == 2 && now["lobby"].UID != jobs["lobby"].UID && now["dock"].UID != jobs["dock"].UID
	})
	h.succeed(t, h.waitPods(t, LabelBroker+"=inventory", 2, "scheduled", func(p *corev1.Pod) bool {
		return scheduled(p) && p.Status.Phase != corev1.PodSucceeded
	}))
	h.waitBroker(t, "", "inventory", "both Completed again", h.allStates(t, "inventory", Completed, "lobby", "dock"))
}

// vanishGrace is the grace of testJobs' Broker: short enough to wait
// for, long enough that the test sees the device's goneSince first.
const vanishGrace = 15

func testVanish(t *testing.T, h *harness) {
	before := h.jobs(t, "inventory")["dock"]
	h.store.set("dock")
	br := h.waitBroker(t, "", "inventory", "dock gone since, on its Job", func(br *Broker) bool {
		_, ok := h.jobs(t, "inventory")["dock"].Annotations[AnnotationGoneSince]
		return ok && br.Status.Devices == 1
	})
	if br.Status.Workloads != 2 || br.Status.Completed != 2 {
		t.Errorf("within the grace: %+v, want dock's Job still counted", br.Status)
	}
	h.waitBroker(t, "", "inventory", "dock's workload gone after the grace", func(br *Broker) bool {
		_, ok := h.jobs(t, "inventory")["dock"]
		return br.Status.Workloads == 1 && !ok
	})
	h.store.set("dock", clusterNode)
	h.waitBroker(t, "", "inventory", "dock's Job made again", func(*Broker) bool { return h.states(t, "inventory")["dock"] == Pending })
	if after := h.jobs(t, "inventory")["dock"]; after.UID == before.UID || after.UID == "" {
		t.Errorf("dock's Job %s, before %s: want a new one", after.UID, before.UID)
	}
	h.succeed(t, h.waitPods(t, LabelDevice+"="+before.Labels[LabelDevice], 1, "scheduled", func(p *corev1.Pod) bool {
		return scheduled(p) && p.Status.Phase != corev1.PodSucceeded
	}))
	h.waitBroker(t, "", "inventory", "both Completed, said so", func(br *Broker) bool {
		return br.Status.Completed == 2 && h.allStates(t, "inventory", Completed, "lobby", "dock")(br)
	})
}

// testRestart starts a new controller, as a new leader would, and checks
// that it writes nothing: everything is as the Brokers want. The
// controller runs until parent ends.
func testRestart(t, parent *testing.T, h *harness) (stop func()) {
	h.writes.take()
	l := &looks{}
	stop = h.run(parent, nil, func(c *Controller) { c.afterLook = l.hook })
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(context.Context) (bool, error) {
		return l.settled([]string{h.Namespace + "/inventory"}, 2, 3*workloadSettle), nil
	})
	if err != nil {
		t.Fatalf("the new controller never looked at the Broker twice: %v", err)
	}
	if w := h.writes.take(); len(w) != 0 {
		t.Errorf("a new leader wrote %v, want nothing", w)
	}
	return stop
}

func testDeployments(t *testing.T, h *harness) {
	br := jobsBroker("frames", 3)
	tpl := br.Spec.Job.Template
	tpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	br.Spec.Job, br.Spec.Deployment = nil, &DeploymentTemplate{Replicas: ptr.To(int32(5)), Template: tpl}
	br.Spec.Services = &Services{PerDevice: &corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8554}}},
		Pool: &corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 8554}}}}
	h.create(t, br)
	h.waitBroker(t, "", "frames", "a Deployment per camera", h.allStates(t, "frames", Pending, "lobby", "dock"))
	pods := h.waitPods(t, LabelBroker+"=frames", 4, "scheduled, two per camera (its capacity)", scheduled)
	checkJobRequests(t, pods)
	perDevice := map[string]int{}
	for _, p := range pods {
		perDevice[p.Labels[LabelDevice]]++
	}
	if len(perDevice) != 2 || slices.ContainsFunc(slices.Collect(maps.Values(perDevice)), func(n int) bool { return n != 2 }) {
		t.Errorf("pods per device %v", perDevice)
	}
	svcs, err := h.Client.CoreV1().Services(h.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelBroker + "=frames"})
	if err != nil || len(svcs.Items) != 3 {
		t.Fatalf("Services %v, %v: want one per camera and the pool's", svcs, err)
	}
	h.update(t, "frames", func(s *Spec) { s.Deployment.Template.Spec.Containers[0].Image = "y" })
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(ctx context.Context) (bool, error) {
		l, err := h.Client.AppsV1().ReplicaSets(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelBroker + "=frames"})
		return err == nil && len(l.Items) == 4, nil
	})
	if err != nil {
		t.Errorf("no new ReplicaSet per Deployment after the template changed: %v", err)
	}
	testUnhealthy(t, h)
	h.deleteBroker(t, "frames")
}

// testUnhealthy: the node still sees the loading dock (its Instance says
// so: a bridge keeps a vanished device while pods hold it) but has none
// of it allocatable. Its Deployment goes after the grace, the lobby's
// stays; healthy again, it has one again.
func testUnhealthy(t *testing.T, h *harness) {
	dock := instance.Name(testPool, "dock", "", true)
	deps := func() map[string]types.UID {
		l, err := h.Client.AppsV1().Deployments(h.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelBroker + "=frames"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]types.UID{}
		for _, d := range l.Items {
			out[h.deviceID(t, d.Labels[LabelDevice])] = d.UID
		}
		return out
	}
	before := deps()
	h.offer(t, map[string]int64{"cdi.local/" + dock: 0})
	h.waitBroker(t, "", "frames", "the dock's Deployment gone", h.allStates(t, "frames", Pending, "lobby"))
	if after := deps(); len(after) != 1 || after["lobby"] != before["lobby"] {
		t.Errorf("Deployments %v, before %v: want the lobby's alone, the same", after, before)
	}
	h.offer(t, map[string]int64{"cdi.local/" + dock: 2})
	h.waitBroker(t, "", "frames", "the dock's Deployment back", h.allStates(t, "frames", Pending, "lobby", "dock"))
}

// deleteBroker deletes a Broker and waits until the garbage collector
// has deleted its workloads, and theirs their pods; it then plays the
// kubelet, which confirms a bound pod's deletion, so that the pods'
// devices are free for the next test.
func (h *harness) deleteBroker(t *testing.T, name string) {
	t.Helper()
	if err := h.dyn.Resource(Resource).Namespace(h.Namespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	selector := metav1.ListOptions{LabelSelector: LabelBroker + "=" + name}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(ctx context.Context) (bool, error) {
		jobs, err := h.Client.BatchV1().Jobs(h.Namespace).List(ctx, selector)
		if err != nil {
			return false, nil
		}
		deps, err := h.Client.AppsV1().Deployments(h.Namespace).List(ctx, selector)
		return err == nil && len(jobs.Items)+len(deps.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("the workloads of deleted Broker %s are still there: %v", name, err)
	}
	pods := h.waitPods(t, selector.LabelSelector, -1, "deleted", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	for _, p := range pods {
		err := h.Client.CoreV1().Pods(h.Namespace).Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
}

func testPoolWorkload(t *testing.T, h *harness) {
	br := jobsBroker("pair", 60)
	tpl := br.Spec.Job.Template
	tpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	br.Spec.Job, br.Spec.Deployment = nil, &DeploymentTemplate{Template: tpl}
	br.Spec.Strategy, br.Spec.Count = Pool, 2
	h.create(t, br)
	pods := h.waitPods(t, LabelBroker+"=pair", 1, "scheduled", scheduled)
	if q := pods[0].Spec.Containers[0].Resources.Limits["cdi.local/"+testPool]; q.Value() != 2 {
		t.Errorf("the pod's limits %v, want %s: 2", pods[0].Spec.Containers[0].Resources.Limits, testPool)
	}
	h.waitBroker(t, "", "pair", "the pool's workload", func(br *Broker) bool { return br.Status.Workloads == 1 })
	if d, err := h.Client.AppsV1().Deployments(h.Namespace).Get(t.Context(), "pair", metav1.GetOptions{}); err != nil || d.Labels[LabelDevice] != "" {
		t.Errorf("the pool's Deployment pair: %v, %v", err, d.Labels)
	}
	h.deleteBroker(t, "pair")
}

func testNotServed(t *testing.T, h *harness) {
	ns := h.Env.Namespace(t)
	br := jobsBroker("elsewhere", 60)
	br.Namespace = ns
	h.create(t, br)
	got := h.waitBroker(t, ns, "elsewhere", "refused", func(br *Broker) bool {
		return condition(br, ConditionAccepted).Reason == ReasonNamespaceNotServed
	})
	if c := condition(got, ConditionAccepted); c.Status != metav1.ConditionFalse {
		t.Errorf("Accepted %+v", c)
	}
	if l, err := h.Client.BatchV1().Jobs(ns).List(t.Context(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("Jobs in %s: %v, %v", ns, l, err)
	}
}

// testCreateFailed: a Job the API server refuses (its pod template is
// invalid), and a Job whose name an object of someone else's has, are
// reported in the Created condition; the other is made, and the other's
// object is left alone.
func testCreateFailed(t *testing.T, h *harness) {
	br := jobsBroker("refused", 60)
	br.Spec.Job.Template.Spec.Containers[0].Name = "Not_A_Name"
	h.create(t, br)
	got := h.waitBroker(t, "", "refused", "Created False", func(br *Broker) bool {
		return condition(br, ConditionCreated).Status == metav1.ConditionFalse
	})
	if c, r := condition(got, ConditionCreated), condition(got, ConditionReady); c.Reason != ReasonCreateFailed ||
		r.Reason != ReasonCreateFailed || got.Status.Pending != 2 || len(h.jobs(t, "refused")) != 0 {
		t.Errorf("Created %+v, Ready %+v, status %+v: want CreateFailed, two workloads Pending, no Job", c, r, got.Status)
	}
	lobby := instance.Name(testPool, "lobby", "", true)
	taken := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: workloadName("taken", lobby)}, Spec: *jobsBroker("x", 1).Spec.Job.DeepCopy()}
	taken, err := h.Client.BatchV1().Jobs(h.Namespace).Create(t.Context(), taken, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.create(t, jobsBroker("taken", 60))
	h.waitBroker(t, "", "taken", "NameTaken, the dock's Job made", func(br *Broker) bool {
		return condition(br, ConditionCreated).Reason == ReasonNameTaken && h.states(t, "taken")["dock"] == Pending
	})
	if _, ok := h.states(t, "taken")["lobby"]; ok {
		t.Errorf("the lobby's Job is made, though its name is someone else's Job's")
	}
	if j, err := h.Client.BatchV1().Jobs(h.Namespace).Get(t.Context(), taken.Name, metav1.GetOptions{}); err != nil || j.UID != taken.UID || len(j.OwnerReferences) != 0 {
		t.Errorf("someone else's Job %s: %v, %+v", taken.Name, err, j)
	}
	h.deleteBroker(t, "refused")
	h.deleteBroker(t, "taken")
}

// testFailover runs two controllers, as an old leader that has not yet
// noticed it lost the lease and the new one. A stops before its second
// create, B makes everything, A goes on: its creates fail and change
// nothing. Then A stops before deleting the Job of a camera gone past
// the grace, the camera comes back, and A goes on: it looks once more
// and deletes nothing.
func testFailover(t *testing.T, h *harness) {
	gate := h.store.set("gate", clusterNode)
	h.offer(t, map[string]int64{"cdi.local/" + gate.Name: 2})
	paused, release := make(chan action, 1), make(chan struct{})
	creates := 0
	aLooks := &looks{}
	stopA := h.run(t, nil, func(c *Controller) {
		c.afterLook = aLooks.hook
		c.beforeWrite = func(a action) {
			if kindOf(a.obj) != "Job" || a.obj.GetLabels()[LabelBroker] != "failover" {
				return
			}
			if a.op == create {
				creates++
			}
			if a.op == create && creates == 2 || a.op == remove && a.gone != "" {
				paused <- a
				<-release
			}
		}
	})
	defer stopA()
	h.create(t, jobsBroker("failover", 1))
	first := <-paused
	t.Logf("A paused before: %s", first)
	stopB := h.run(t, nil, nil)
	h.waitBroker(t, "", "failover", "B made every Job", h.allStates(t, "failover", Pending, "lobby", "dock", "gate"))
	before := h.jobs(t, "failover")
	stopWatch := h.watchJobs(t, "failover")
	release <- struct{}{}
	n := aLooks.count(h.Namespace + "/failover")
	h.waitLooked(t, aLooks, h.Namespace+"/failover", n+1)
	stopB()
	h.checkSameJobs(t, before, h.jobs(t, "failover"))
	if c := condition(h.waitBroker(t, "", "failover", "read", func(*Broker) bool { return true }), ConditionCreated); c.Status != metav1.ConditionTrue {
		t.Errorf("after A's creates failed for the Jobs B made: %+v, want Created", c)
	}
	// The camera gone past the grace, A stops before deleting its Job.
	h.store.set("gate")
	a := <-paused
	t.Logf("A paused before: %s", a)
	h.store.set("gate", clusterNode)
	release <- struct{}{}
	n = aLooks.count(h.Namespace + "/failover")
	h.waitLooked(t, aLooks, h.Namespace+"/failover", n+1)
	h.checkSameJobs(t, before, h.jobs(t, "failover"))
	if seen := stopWatch(); len(seen) > 0 {
		t.Errorf("Jobs changed while the leaders interleaved: %v", seen)
	}
	h.deleteBroker(t, "failover")
}

// checkSameJobs checks that the Jobs are the ones before, by UID.
func (h *harness) checkSameJobs(t *testing.T, before, after map[string]batchv1.Job) {
	t.Helper()
	if len(after) != len(before) {
		t.Errorf("%d Jobs, want %d", len(after), len(before))
	}
	for id, j := range before {
		if after[id].UID != j.UID {
			t.Errorf("the Job of %s is %s, was %s", id, after[id].UID, j.UID)
		}
	}
}

func (l *looks) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[key]
}

func (h *harness) waitLooked(t *testing.T, l *looks, key string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, clusterWait, true, func(context.Context) (bool, error) {
		return l.count(key) >= n, nil
	})
	if err != nil {
		t.Fatalf("%s never looked at %d times: %v", key, n, err)
	}
}

// watchJobs records the Broker's Jobs' creations and deletions until
// the returned stop, which returns them, and the watch's failure or end
// before its stop: a watch that failed is no proof that nothing
// changed. It watches from the API server's cache as the cache is
// (resourceVersion 0): a watch from now waits for the cache to be as
// new as etcd, and fails after 3 s ("Too large resource version") when
// no Job's event has made the Jobs' cache so.
func (h *harness) watchJobs(t *testing.T, broker string) func() []string {
	t.Helper()
	initial := map[string]bool{}
	for _, j := range h.jobs(t, broker) {
		initial[string(j.UID)] = true
	}
	w, err := h.Client.BatchV1().Jobs(h.Namespace).Watch(t.Context(),
		metav1.ListOptions{LabelSelector: LabelBroker + "=" + broker, ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	var stopped atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*batchv1.Job)
			switch {
			case stopped.Load():
				// the stop's own end of the stream
			case ev.Type == watch.Error:
				seen = append(seen, fmt.Sprintf("ERROR %v", apierrors.FromObject(ev.Object)))
			case ok && (ev.Type == watch.Deleted || ev.Type == watch.Added && !initial[string(j.UID)]):
				seen = append(seen, fmt.Sprintf("%s %s %s", ev.Type, j.Name, j.UID))
			}
		}
		if !stopped.Load() {
			seen = append(seen, "the watch ended before its stop")
		}
	}()
	return func() []string { stopped.Store(true); w.Stop(); <-done; return seen }
}

// testDRA publishes two terminals of node n1 as the bridge would, and
// runs a Job per terminal of the pool served through DRA.
func testDRA(t *testing.T, h *harness) {
	h.CreateExamples(t)
	pool := discovery.Pool{Name: "tty-generic", Resource: "tty", Devices: []spec.DeviceInfo{
		{ID: "tty13", Resource: "tty", Healthy: true, Capacity: 1}, {ID: "tty14", Resource: "tty", Healthy: true, Capacity: 1}}}
	res := dradevices.Resources("cdi.local", clusterNode, []discovery.Pool{pool}, nil)
	for name, p := range res.Pools {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "n1-"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: "cdi.local", NodeName: ptr.To(clusterNode), Devices: p.Slices[0].Devices,
			Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}}}
		if _, err := h.Client.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.run(t, []string{"tty-generic"}, nil)
	br := jobsBroker("ttys", 60)
	br.Spec.Pool = "tty-generic"
	h.create(t, br)
	h.waitBroker(t, "", "ttys", "a Job per terminal", func(br *Broker) bool { return br.Status.Workloads == 2 && len(h.jobs(t, "ttys")) == 2 })
	ids := map[string]string{}
	for _, id := range []string{"tty13", "tty14"} {
		ids[instance.Name("tty-generic", id, clusterNode, false)] = id
	}
	for _, p := range h.waitPods(t, LabelBroker+"=ttys", 2, "scheduled", scheduled) {
		claim := h.AllocatedClaim(t, &p)
		results := claim.Status.Allocation.Devices.Results
		want := dradevices.DeviceName(ids[p.Labels[LabelDevice]])
		if len(results) != 1 || results[0].Device != want || results[0].Pool != dradevices.PoolName(clusterNode, "tty-generic") {
			t.Errorf("pod %s (device %s): claim allocated %+v, want %s", p.Name, ids[p.Labels[LabelDevice]], results, want)
		}
	}
	tpls, err := h.Client.ResourceV1().ResourceClaimTemplates(h.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelBroker + "=ttys"})
	if err != nil || len(tpls.Items) != 2 {
		t.Errorf("claim templates %v, %v: want one per terminal", tpls, err)
	}
}

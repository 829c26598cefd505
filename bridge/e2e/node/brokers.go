package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/broker"
	"github.com/cdiexec/cdi/bridge/e2e/node/internal/report"
	"github.com/cdiexec/cdi/bridge/instance"
)

const (
	// brokerControllers are what the Brokers' workloads need of
	// kube-controller-manager besides the DRA node's: Jobs, Deployments
	// and their ReplicaSets made into pods, and a Broker's objects
	// deleted with it.
	brokerControllers = "job-controller,deployment-controller,replicaset-controller,garbage-collector-controller"
	// brokersExamples holds the Brokers' RBAC, relative to the
	// repository.
	brokersExamples = "bridge/deploy/examples/brokers"
	// brokerWait bounds the waits on a Broker's workloads: made by the
	// elected bridge, run by the node.
	brokerWait = 2 * time.Minute
)

// applyBrokersRBAC creates examples/brokers/rbac.yaml's objects in dir,
// the namespaced ones in the pods' namespace, the one the bridge acts on
// Brokers in: the bridge's access is the shipped one.
func (c *Cluster) applyBrokersRBAC(ctx context.Context, dir string) error {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	file := filepath.Join(dir, "rbac.yaml")
	objs, err := readDocuments(file)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.create(ctx, mapper, file, obj, PodNamespace); err != nil {
			return err
		}
	}
	return nil
}

// brokerPodTemplate is the template of a Broker's pods: podcheck, which
// reports into reportDir/<pod name> and, once, exits (a Job's), else
// stays. Like the test's other pods, on the host's network, the local
// image only, no ServiceAccount token.
func brokerPodTemplate(reportDir string, once bool) corev1.PodTemplateSpec {
	cmd, restart := "report", corev1.RestartPolicyAlways
	if once {
		cmd, restart = "report-once", corev1.RestartPolicyNever
	}
	dirType := corev1.HostPathDirectory
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		HostNetwork: true, RestartPolicy: restart, AutomountServiceAccountToken: ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(1)),
		Containers: []corev1.Container{{
			Name: containerName, Image: imageName, ImagePullPolicy: corev1.PullNever,
			Args: []string{cmd, "/report/$(POD_NAME)"},
			Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "report", MountPath: "/report"}},
		}},
		Volumes: []corev1.Volume{{Name: "report", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: reportDir, Type: &dirType}}}},
	}}
}

// brokers reads and writes the node's Brokers, in the pods' namespace.
type brokers struct {
	c *Cluster
	// reports is the host directory the Brokers' pods report into.
	reports string
}

func newBrokers(t testing.TB, c *Cluster, l Layout) *brokers {
	t.Helper()
	b := &brokers{c: c, reports: l.Path("broker-reports")}
	if err := os.MkdirAll(b.reports, 0o755); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *brokers) resource() dynamic.ResourceInterface {
	return b.c.Dynamic.Resource(broker.Resource).Namespace(PodNamespace)
}

// create creates a Broker of spec named name.
func (b *brokers) create(t testing.TB, name string, spec broker.Spec) {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": broker.Resource.GroupVersion().String(), "kind": broker.Kind,
		"metadata": map[string]any{"name": name}, "spec": obj}}
	if _, err := b.resource().Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Broker %s: %v", name, err)
	}
}

// get reads a Broker.
func (b *brokers) get(ctx context.Context, name string) (*broker.Broker, error) {
	u, err := b.resource().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	br := &broker.Broker{}
	return br, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, br)
}

// wait waits until done says yes of the Broker, what saying what for the
// failure's message, and returns the Broker as done saw it.
func (b *brokers) wait(t testing.TB, name, what string, done func(*broker.Broker) bool) *broker.Broker {
	t.Helper()
	var br *broker.Broker
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, brokerWait, true, func(ctx context.Context) (bool, error) {
		got, err := b.get(ctx, name)
		if err != nil {
			return false, nil
		}
		br = got
		return done(got), nil
	})
	if err != nil {
		status := "never read"
		if br != nil {
			status = fmt.Sprintf("%+v", br.Status)
		}
		t.Fatalf("Broker %s: %s: %v; its status %s", name, what, err, status)
	}
	return br
}

// update changes a Broker's spec.
func (b *brokers) update(t testing.TB, name string, change func(*broker.Spec)) {
	t.Helper()
	u, err := b.resource().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	br := &broker.Broker{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, br); err != nil {
		t.Fatal(err)
	}
	change(&br.Spec)
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&br.Spec)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"] = spec
	if _, err := b.resource().Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// remove deletes a Broker and waits until its pods are gone: the garbage
// collector deletes its workloads, theirs their pods, and the kubelet
// confirms.
func (b *brokers) remove(t testing.TB, name string) {
	t.Helper()
	if err := b.resource().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitPods(t, broker.LabelBroker+"="+name, "gone with their Broker", func(ps []corev1.Pod) bool { return len(ps) == 0 })
}

// waitPods waits until done says yes of the pods of selector, and
// returns them.
func (b *brokers) waitPods(t testing.TB, selector, what string, done func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, brokerWait, true, func(ctx context.Context) (bool, error) {
		l, err := b.c.Client.CoreV1().Pods(PodNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = l.Items
		return done(pods), nil
	})
	if err != nil {
		var states []string
		for _, p := range pods {
			states = append(states, p.Name+" "+string(p.Status.Phase)+"\n"+describePod(b.c.Client, &p))
		}
		t.Fatalf("pods %s: %s: %v; last seen %v", selector, what, err, states)
	}
	return pods
}

// report is what pod p's podcheck reported.
func (b *brokers) report(t testing.TB, p corev1.Pod) report.Report {
	t.Helper()
	r, err := readReport(t.Context(), filepath.Join(b.reports, p.Name))
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	return r
}

// allRunning is whether n of the pods have not ended, each with its
// container running. A pod the kubelet refused (its device's plugin
// gone while the bridge restarted) has failed, and its ReplicaSet made
// another.
func allRunning(n int) func([]corev1.Pod) bool {
	return func(ps []corev1.Pod) bool {
		live := 0
		for i := range ps {
			if ps[i].Status.Phase == corev1.PodFailed || ps[i].Status.Phase == corev1.PodSucceeded {
				continue
			}
			if !running(&ps[i]) || ps[i].DeletionTimestamp != nil {
				return false
			}
			live++
		}
		return live == n
	}
}

// liveOnly is the pods that have not ended.
func liveOnly(ps []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range ps {
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			out = append(out, p)
		}
	}
	return out
}

// allSucceeded is whether there are n pods, each succeeded.
func allSucceeded(n int) func([]corev1.Pod) bool {
	return func(ps []corev1.Pod) bool {
		if len(ps) != n {
			return false
		}
		for _, p := range ps {
			if p.Status.Phase != corev1.PodSucceeded {
				return false
			}
		}
		return true
	}
}

// statesOf is a Broker's workloads' states by device id, ids naming the
// devices it may have, as its Jobs and Deployments say.
func (b *brokers) statesOf(t testing.TB, name string, ids []string) map[string]broker.State {
	t.Helper()
	byKey := map[string]string{}
	for _, id := range ids {
		byKey[deviceKey(id)] = id
	}
	sel := metav1.ListOptions{LabelSelector: broker.LabelBroker + "=" + name}
	jobs, err := b.c.Client.BatchV1().Jobs(PodNamespace).List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := b.c.Client.AppsV1().Deployments(PodNamespace).List(t.Context(), sel)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]broker.State{}
	for _, j := range jobs.Items {
		out[idOf(byKey, j.Labels[broker.LabelDevice])] = jobState(&j)
	}
	for _, d := range deps.Items {
		out[idOf(byKey, d.Labels[broker.LabelDevice])] = deploymentState(&d)
	}
	return out
}

// deviceKey is the device key (Instance name) of a device id of the
// node's: a terminal of the DRA pool, or a camera, which is shared.
func deviceKey(id string) string {
	if strings.HasPrefix(id, "tty") {
		return instance.Name(draPool, id, Name, false)
	}
	return instance.Name("camera-endpoint", id, "", true)
}

// idOf is the id of key in byKey, "?"+key when it is none of them.
func idOf(byKey map[string]string, key string) string {
	if id, ok := byKey[key]; ok {
		return id
	}
	return "?" + key
}

// jobState is a Job's state as the Broker counts it.
func jobState(j *batchv1.Job) broker.State {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && c.Type == batchv1.JobFailed {
			return broker.Failed
		}
		if c.Status == corev1.ConditionTrue && c.Type == batchv1.JobComplete {
			return broker.Completed
		}
	}
	if j.Status.Ready != nil && *j.Status.Ready > 0 {
		return broker.Active
	}
	return broker.Pending
}

// deploymentState is a Deployment's state as the Broker counts it.
func deploymentState(d *appsv1.Deployment) broker.State {
	if d.Status.AvailableReplicas > 0 {
		return broker.Active
	}
	return broker.Pending
}

// every is whether the Broker has a workload for each of ids, each in
// state want, and no other.
func (b *brokers) every(t testing.TB, name string, want broker.State, ids ...string) func(*broker.Broker) bool {
	return func(*broker.Broker) bool {
		s := b.statesOf(t, name, ids)
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

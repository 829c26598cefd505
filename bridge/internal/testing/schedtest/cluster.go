package schedtest

import (
	"os"
	"os/exec"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/proctest"
)

// Cluster is a running cluster, an admin client of it and the test's
// namespace.
type Cluster struct {
	Env       *apitest.Env
	Client    kubernetes.Interface
	Namespace string
}

// Controllers of kube-controller-manager, as its --controllers lists
// them. Start runs ClaimControllers: the resourceclaim controller alone,
// which makes a pod's claims from their templates. A test of Jobs and
// Deployments needs WorkloadControllers besides: their controllers, the
// ReplicaSets', and the garbage collector, which deletes what an owner's
// deletion leaves. A test of device taints needs TaintEvictionController:
// it evicts the pods whose claims hold a device with a NoExecute taint
// they do not tolerate. A test of a Job's ttlSecondsAfterFinished needs
// TTLAfterFinishedController: it deletes a finished Job once its TTL is
// over.
const (
	ClaimControllers           = "resourceclaim-controller"
	WorkloadControllers        = "job-controller,deployment-controller,replicaset-controller,garbage-collector-controller"
	TaintEvictionController    = "device-taint-eviction-controller"
	TTLAfterFinishedController = "ttl-after-finished-controller"
)

// Start runs a cluster for the test: the server startServer starts, then
// the controller-manager (ClaimControllers) and the scheduler over it. It
// calls startServer only once it knows the programs, so that a skipped
// test starts nothing.
func Start(t testing.TB, startServer func() *apitest.Env) *Cluster {
	t.Helper()
	return StartWith(t, startServer, ClaimControllers)
}

// StartWith is Start with the controller-manager running controllers,
// comma-separated.
func StartWith(t testing.TB, startServer func() *apitest.Env, controllers string) *Cluster {
	t.Helper()
	sched, kcm := programs(t)
	env := startServer()
	startControllers(t, env, sched, kcm, controllers)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Env: env, Client: client, Namespace: env.Namespace(t)}
	c.createDefaultServiceAccount(t)
	return c
}

// startControllers runs kube-controller-manager, with controllers, and
// kube-scheduler against env as its admin until the test ends. Each is
// the only one of its kind, so elects no leader, and serves no HTTPS
// (--secure-port=0): no test reads its health, and tests running side by
// side would contend for the default port.
func startControllers(t testing.TB, env *apitest.Env, sched, kcm, controllers string) {
	t.Helper()
	admin := env.Kubeconfig(t, apitest.AdminUser)
	common := []string{"--kubeconfig=" + admin, "--authentication-kubeconfig=" + admin, "--authorization-kubeconfig=" + admin,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"}
	proctest.Start(t, exec.Command(kcm, append([]string{"--controllers=" + controllers}, common...)...), "kube-controller-manager", nil)
	proctest.Start(t, exec.Command(sched, common...), "kube-scheduler", nil)
}

// createDefaultServiceAccount creates the namespace's default
// ServiceAccount, which no controller here makes and without which the
// apiserver admits no pod.
func (c *Cluster) createDefaultServiceAccount(t testing.TB) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.Client.CoreV1().ServiceAccounts(c.Namespace).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// programs is the scheduler and the controller-manager that
// KUBE_SCHEDULER and KUBE_CONTROLLER_MANAGER name; without them the
// test is skipped, or failed where apitest.MustRun.
func programs(t testing.TB) (sched, kcm string) {
	t.Helper()
	sched, kcm = os.Getenv("KUBE_SCHEDULER"), os.Getenv("KUBE_CONTROLLER_MANAGER")
	if sched == "" || kcm == "" {
		if apitest.MustRun() {
			t.Fatal("KUBE_SCHEDULER and KUBE_CONTROLLER_MANAGER must name the programs (the CI environment variable is set)")
		}
		t.Skip("skipping: KUBE_SCHEDULER and KUBE_CONTROLLER_MANAGER do not name the programs")
	}
	return sched, kcm
}

// CreateNode creates a ready, untainted Node, with labels, that takes
// pods.
func (c *Cluster) CreateNode(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx := t.Context()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	node, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"),
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	node.Status.Capacity = node.Status.Allocatable
	if node, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The apiserver taints a new Node not-ready; no node-lifecycle
	// controller runs here to lift it.
	node.Spec.Taints = nil
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

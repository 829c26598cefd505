package broker

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/fanout"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
)

// clusterWait bounds every wait on the cluster.
const clusterWait = 2 * time.Minute

// brokerCRD is the shipped Broker CRD, relative to the repository.
const brokerCRD = "bridge/deploy/crd/brokers.yaml"

// fakeStore is the elected bridge's Instance store at its seam:
// Instances the test sets, and their change feed. The controller reads
// nothing else of it: the rest of elected.Store is nil, and would panic.
type fakeStore struct {
	elected.Store
	mu        sync.Mutex
	instances map[string]instance.Instance
	changes   fanout.Fanout
}

func newFakeStore() *fakeStore { return &fakeStore{instances: map[string]instance.Instance{}} }

func (s *fakeStore) List(context.Context) ([]instance.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.instances)), nil
}

func (s *fakeStore) Changes() (<-chan struct{}, func()) { return s.changes.Subscribe() }

// set records that nodes see the shared camera id of capacity 2 (none:
// gone from every node).
func (s *fakeStore) set(id string, nodes ...string) instance.Instance {
	in := instance.Instance{Name: instance.Name(testPool, id, "", true), Config: testPool, DeviceID: id, Shared: true,
		Capacity: 2, Nodes: nodes, Properties: map[string]string{"site": "lab"}}
	s.mu.Lock()
	s.instances[in.Name] = in
	s.mu.Unlock()
	s.changes.Notify()
	return in
}

// writeCounter counts the requests that change something, by method
// and resource ("POST jobs", "PUT brokers/status"), that go through its
// transport.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			w.mu.Lock()
			w.counts[req.Method+" "+resourceOf(req.URL.Path)]++
			w.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// resourceOf is the resource (and subresource) a request's path names:
// /apis/cdi.local/v1alpha1/namespaces/ns/brokers/b/status is
// brokers/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch i := slices.Index(parts, "namespaces"); {
	case i >= 0 && len(parts) > i+2:
		parts = parts[i+2:]
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	default:
		parts = parts[min(3, len(parts)):]
	}
	switch len(parts) {
	case 0:
		return path
	case 1, 2:
		return parts[0]
	}
	return parts[0] + "/" + parts[2]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// take returns the counts so far and starts again.
func (w *writeCounter) take() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.counts
	w.counts = map[string]int{}
	return out
}

// harness is a cluster with the Job, Deployment, ReplicaSet, garbage
// collector, claim and TTL-after-finished controllers and the scheduler, a Node n1 that has
// the cameras' resources, and the controller's clients, whose writes it
// counts.
type harness struct {
	*schedtest.Cluster
	dyn    dynamic.Interface
	store  *fakeStore
	writes *writeCounter
	cfg    *rest.Config
}

const clusterNode = "n1"

func startHarness(t *testing.T) *harness {
	t.Helper()
	h, _ := startHarnessWith(t, apitest.Options{})
	return h
}

// startHarnessWith is startHarness with the API server's options (its
// users), and returns its Env too. The controller's clients are the
// admin's until the caller sets h.cfg another way (clientConfig).
func startHarnessWith(t *testing.T, opts apitest.Options) (*harness, *apitest.Env) {
	t.Helper()
	var env *apitest.Env
	c := schedtest.StartWith(t, func() *apitest.Env {
		env = apitest.Start(t, opts)
		crd, err := apitest.RepoFile(brokerCRD)
		if err == nil {
			err = apitest.InstallCRD(t.Context(), env.Config, crd)
		}
		if err != nil {
			t.Fatal(err)
		}
		return env
	}, schedtest.WorkloadControllers+","+schedtest.ClaimControllers+","+schedtest.TTLAfterFinishedController)
	h := &harness{Cluster: c, store: newFakeStore(), writes: &writeCounter{counts: map[string]int{}}}
	var err error
	if h.dyn, err = dynamic.NewForConfig(c.Env.Config); err != nil {
		t.Fatal(err)
	}
	h.clientConfig(c.Env.Config)
	c.CreateNode(t, clusterNode, map[string]string{corev1.LabelHostname: clusterNode})
	return h, env
}

// clientConfig makes the controller's clients cfg's, at the bridge's
// rate limit, their writes counted.
func (h *harness) clientConfig(cfg *rest.Config) {
	h.cfg = rest.CopyConfig(cfg)
	h.cfg.QPS, h.cfg.Burst = kube.ClientQPS, kube.ClientBurst
	h.cfg.Wrap(h.writes.wrap)
}

// offer gives the Node count of each resource, as the kubelet reports
// what the bridge's device plugins advertise.
func (h *harness) offer(t *testing.T, resources map[string]int64) {
	t.Helper()
	n, err := h.Client.CoreV1().Nodes().Get(t.Context(), clusterNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, count := range resources {
		q := *resource.NewQuantity(count, resource.DecimalSI)
		n.Status.Allocatable[corev1.ResourceName(name)], n.Status.Capacity[corev1.ResourceName(name)] = q, q
	}
	if _, err := h.Client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// run runs a controller over the store, serving the test's namespace and
// those given, with the DRA pools given, until the returned stop; set
// sets its hooks before it starts.
func (h *harness) run(t *testing.T, draPools []string, set func(*Controller), namespaces ...string) (stop func()) {
	t.Helper()
	return startController(t, h.cfg, h.store, append([]string{h.Namespace}, namespaces...), draPools, set)
}

// startController runs a controller with clients of cfg over store until
// the returned stop, or the test's end.
func startController(tb testing.TB, cfg *rest.Config, store elected.Store, namespaces, draPools []string, set func(*Controller)) (stop func()) {
	tb.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := New(Config{Client: client, Dynamic: dyn, Metadata: md, Namespaces: namespaces, Domain: "cdi.local", DRAPools: draPools})
	if err != nil {
		tb.Fatal(err)
	}
	if set != nil {
		set(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(ctx, store); err != nil {
			tb.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)
	return stop
}

// create creates br in its namespace (the test's when empty).
func (h *harness) create(t *testing.T, br *Broker) {
	t.Helper()
	if br.Namespace == "" {
		br.Namespace = h.Namespace
	}
	br.APIVersion, br.Kind = Resource.GroupVersion().String(), Kind
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(br)
	if err != nil {
		t.Fatal(err)
	}
	delete(obj, "status")
	if _, err := h.dyn.Resource(Resource).Namespace(br.Namespace).Create(t.Context(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// get reads the Broker name of namespace ns (the test's when empty).
func (h *harness) get(ctx context.Context, ns, name string) (*Broker, error) {
	if ns == "" {
		ns = h.Namespace
	}
	u, err := h.dyn.Resource(Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return fromUnstructured(u)
}

// waitBroker waits until done says yes of the Broker, what saying what
// for the failure's message, and returns it as done saw it.
func (h *harness) waitBroker(t *testing.T, ns, name, what string, done func(*Broker) bool) *Broker {
	t.Helper()
	var br *Broker
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(ctx context.Context) (bool, error) {
		got, err := h.get(ctx, ns, name)
		if err != nil {
			return false, nil
		}
		br = got
		return done(got), nil
	})
	if err != nil {
		t.Fatalf("Broker %s: %s: %v; last seen status %+v", name, what, err, br.Status)
	}
	return br
}

// update changes the Broker's spec as change says.
func (h *harness) update(t *testing.T, name string, change func(*Spec)) {
	t.Helper()
	r := h.dyn.Resource(Resource).Namespace(h.Namespace)
	u, err := r.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	br, err := fromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	change(&br.Spec)
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&br.Spec)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"] = spec
	if _, err := r.Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// condition is the Broker's condition of type typ.
func condition(br *Broker, typ string) metav1.Condition {
	for _, c := range br.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// waitPods waits until the pods of selector are n (any number when n is
// negative), each done, and returns them.
func (h *harness) waitPods(t *testing.T, selector string, n int, what string, done func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(ctx context.Context) (bool, error) {
		l, err := h.Client.CoreV1().Pods(h.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = l.Items
		if n >= 0 && len(pods) != n {
			return false, nil
		}
		for i := range pods {
			if !done(&pods[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods %s: want %d %s: %v; last seen %d", selector, n, what, err, len(pods))
	}
	return pods
}

// scheduled is whether the scheduler bound the pod.
func scheduled(p *corev1.Pod) bool { return p.Spec.NodeName == clusterNode }

// succeed plays the kubelet: the pods ran and exited 0.
func (h *harness) succeed(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		p.Status.Phase = corev1.PodSucceeded
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}})
		}
		if _, err := h.Client.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// looks counts the controller's looks at each Broker, for afterLook.
type looks struct {
	mu     sync.Mutex
	counts map[string]int
	last   time.Time
}

func (l *looks) hook(key string, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	l.counts[key]++
	l.last = time.Now()
}

// settled reports whether every key was looked at at least n times, and
// none for quiet.
func (l *looks) settled(keys []string, n int, quiet time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if l.counts[k] < n {
			return false
		}
	}
	return time.Since(l.last) > quiet
}

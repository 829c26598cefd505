package drafront

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
)

// The rebuild prepares again only the claims in use on the node: those
// the kubelet names, and those of a pod it runs that only an init
// container uses (PodResources does not list them; the pod's spec, read
// from the API server, names them). A claim allocated here and reserved
// for a pod the kubelet does not run (rejected, or deleted before its
// Prepare) is not prepared, where nothing would ever DEL its ADD. A
// claim the kubelet stops naming stays while the API server says its
// pod uses it, and is released once the grace is over after its pod is
// gone; so is an ADD of no claim, its terminal left out of the slice
// meanwhile.
func TestRebuildFollowsTheKubelet(t *testing.T) {
	admin := adminOfNode(t)
	// The kubelet's one pod (kubelettest.PodResources lists default/app).
	pod := podOfClaims(t, admin, "app", "running", "init-only")
	running := allocatedClaimFor(t, admin, "running", "tty43", pod)
	initOnly := allocatedClaimFor(t, admin, "init-only", "tty44", pod)
	allocatedClaim(t, admin, "never-started", "n1/tty-generic", "tty44")
	r := newRig(t)
	pools := r.discover(t)
	c := r.config(t, admin)
	var kubelet *kubelettest.PodResources
	kubelet, c.Kubelet = kubelettest.StartPodResources(t)
	kubelet.SetClaims(kubelettest.HeldClaim{Namespace: "default", Name: "running", Driver: "cdi.test"})
	c.Grace, c.SweepPeriod = 3*time.Second, 100*time.Millisecond
	f, err := Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	_, viaDRA := Split(pools, ParsePools("tty-generic"))
	f.SetPools(viaDRA)
	waitRegistered(t, r, "the registration socket")
	both := fmt.Sprint(slices.Sorted(slices.Values([]string{string(running.UID) + "-0", string(initOnly.UID) + "-0"})))
	if got := fmt.Sprint(listed(t, pools[0])); got != both {
		t.Errorf("when the driver registers, the plugin holds %s, want the running pod's claims' ADDs %s", got, both)
	}
	if ckpt, err := dradevices.LoadCheckpoint(r.checkpoint); err != nil || len(ckpt.UIDs()) != 2 {
		t.Errorf("the checkpoint records %v (%v), want the running pod's two claims", ckpt.UIDs(), err)
	}

	kubelet.SetClaims()
	time.Sleep(3 * c.Grace) // the sweeps' chance to release what the pod still uses
	if got := fmt.Sprint(listed(t, pools[0])); got != both {
		t.Errorf("with the kubelet naming no claim, its pod still there, the plugin holds %s, want %s", got, both)
	}
	// No kubelet ends the pod here: deleted at once, as by the kubelet.
	if err := admin.CoreV1().Pods(metav1.NamespaceDefault).Delete(t.Context(), pod.Name, *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claims of the pod gone released", func() bool { return len(listed(t, pools[0])) == 0 })
	if ckpt, err := dradevices.LoadCheckpoint(r.checkpoint); err != nil || len(ckpt.UIDs()) > 0 {
		t.Errorf("the checkpoint records %v (%v), want none", ckpt.UIDs(), err)
	}

	addAs(t, pools[0], "0f1e2d3c-left-0", "tty44")
	waitFor(t, "the leftover's terminal out of the slice", func() bool { return sliceDevices(t, admin) == "[tty43]" })
	waitFor(t, "the leftover released", func() bool { return len(listed(t, pools[0])) == 0 })
	waitSliceOfTwo(t, admin, "both terminals offered again")
}

// podOfClaims creates pod name in namespace default, bound to n1, whose
// container uses claim first and whose init container uses claim init.
func podOfClaims(t *testing.T, client kubernetes.Interface, name, first, init string) *corev1.Pod {
	t.Helper()
	container := func(name, claim string) corev1.Container {
		return corev1.Container{Name: name, Image: "none", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claim}}}}
	}
	// No controller-manager makes the namespace's ServiceAccount, which
	// admission of a pod looks up.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n1",
		InitContainers: []corev1.Container{container("load", "fw")}, Containers: []corev1.Container{container("app", "dev")},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: &first}, {Name: "fw", ResourceClaimName: &init}}}}
	pod, err := client.CoreV1().Pods(metav1.NamespaceDefault).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// allocatedClaimFor is allocatedClaim of the node's terminal device,
// reserved for pod.
func allocatedClaimFor(t *testing.T, client kubernetes.Interface, name, device string, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	c := allocatedClaim(t, client, name, "n1/tty-generic", device)
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	c, err := client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(t.Context(), c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sliceDevices is the devices of the node's slices, as text.
func sliceDevices(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	l, err := c.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: "spec.driver=cdi.test"})
	if err != nil {
		return err.Error()
	}
	var names []string
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	return fmt.Sprint(names)
}

// countingLists counts the LISTs of ResourceClaims made through rt.
type countingLists struct {
	rt    http.RoundTripper
	lists atomic.Int64
}

func (c *countingLists) RoundTrip(req *http.Request) (*http.Response, error) {
	path := strings.TrimSuffix(req.URL.Path, "/")
	if req.Method == http.MethodGet && strings.HasSuffix(path, "/resourceclaims") {
		c.lists.Add(1)
	}
	return c.rt.RoundTrip(req)
}

// The rebuild reads each claim the kubelet names, never a list of the
// cluster's: with manyClaims claims of other nodes in the API server it
// makes no LIST of claims, and is done, the driver registered, well
// inside truthTimeout.
func TestRebuildListsNoClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("creates many claims in a real API server")
	}
	env := apitest.Start(t, apitest.Options{})
	admin := nodeAdmin(t, env.Config)
	createClaims(t, admin, manyClaims)
	running := allocatedClaim(t, admin, "running", "n1/tty-generic", "tty43")
	counter := &countingLists{}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 50, 100 // the bridge's
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t)
	pools := r.discover(t)
	c := r.config(t, client)
	var kubelet *kubelettest.PodResources
	kubelet, c.Kubelet = kubelettest.StartPodResources(t)
	kubelet.SetClaims(kubelettest.HeldClaim{Namespace: "default", Name: "running", Driver: "cdi.test"})
	c.PodUID = "0a1b-pod" // truthTimeout applies
	f, err := Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	_, viaDRA := Split(pools, ParsePools("tty-generic"))
	f.SetPools(viaDRA)
	waitFor(t, "the registration socket", func() bool { return registeredAs(r, c.PodUID) })
	took := time.Since(begun)
	if n := counter.lists.Load(); n != 0 {
		t.Errorf("the rebuild made %d LISTs of ResourceClaims with %d in the cluster, want none", n, manyClaims+1)
	}
	if took > truthTimeout/3 {
		t.Errorf("registered %v after the first discovery, want well inside %v", took, truthTimeout)
	}
	if got := fmt.Sprint(listed(t, pools[0])); got != fmt.Sprint([]string{string(running.UID) + "-0"}) {
		t.Errorf("the plugin holds %s, want the running claim's ADD", got)
	}
	t.Logf("%d claims in the cluster: registered %v after the first discovery, %d LISTs of claims", manyClaims+1, took, counter.lists.Load())
}

// manyClaims is how many claims of other nodes TestRebuildListsNoClaims
// makes: what a large cluster has.
const manyClaims = 20000

// nodeAdmin is an admin client of cfg, with a Node n1.
func nodeAdmin(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return admin
}

// registeredAs says whether the driver of pod uid has its registration
// socket in r (kubeletplugin.RollingUpdate's name).
func registeredAs(r *rig, uid types.UID) bool {
	_, err := os.Stat(filepath.Join(r.registrarDir, "cdi.test-"+string(uid)+"-reg.sock"))
	return err == nil
}

// createClaims creates n unallocated claims in namespace default, some
// at a time.
func createClaims(t *testing.T, c kubernetes.Interface, n int) {
	t.Helper()
	const workers = 16
	begun := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("other-%05d", i)},
					Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
						Name: "tty", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "tty.cdi.local"}}}}}}
				if _, err := c.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Create(t.Context(), claim, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d claims in %v", n, time.Since(begun))
}

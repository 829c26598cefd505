package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// The DRA node: its tty drop-in's pool is served through DRA, its
// cameras by the device plugins.
const (
	// draPool is the bridge's pool served through DRA: the tty drop-in's
	// (DropIn.Pool), whose DRA pool is <node>/<pool>.
	draPool = "tty-generic"
	// draExamples holds the DeviceClasses, claim templates and RBAC of
	// the DRA front end, relative to the repository.
	draExamples = "bridge/deploy/examples/dra"
	// draControllers are what a pod with a claim needs of
	// kube-controller-manager: the claim controller makes a template's
	// claim, the node lifecycle controller lifts the not-ready taint
	// that would keep the scheduler off the node.
	draControllers = "resourceclaim-controller,node-lifecycle-controller"
	// slicesWait bounds the wait for the bridge's ResourceSlices.
	slicesWait = time.Minute
)

// DRANode is a node whose bridge serves draPool through DRA (or, for a
// comparison, as a device plugin), with kube-scheduler to allocate
// claims and the claim controller to make them.
type DRANode struct {
	*Node
	// Checkpoint is the bridge's --dra-checkpoint.
	Checkpoint string
	// Options are what StartDRANodeWith was given.
	Options DRANodeOptions
}

// DRANodeOptions are what a test of a DRA node adds to it.
type DRANodeOptions struct {
	// Controllers are more of kube-controller-manager's, comma-separated.
	Controllers string
	// Apply creates more objects once the cluster has the DRA examples,
	// before the controllers and the bridge start.
	Apply func(context.Context, *Cluster) error
	// BridgeFlags are more of the bridge's flags.
	BridgeFlags map[string]string
}

// StartDRANode starts a node with the controllers a claim needs, the DRA
// examples applied, and the bridge serving draPool through DRA when
// viaDRA, else as a device plugin. The kubelet's directory and the CDI
// spec directory are fresh: an earlier node's claims and specs are not
// this one's.
func StartDRANode(t testing.TB, l Layout, viaDRA bool) *DRANode {
	t.Helper()
	return StartDRANodeWith(t, l, viaDRA, DRANodeOptions{})
}

// StartDRANodeWith is StartDRANode with what o adds.
func StartDRANodeWith(t testing.TB, l Layout, viaDRA bool, o DRANodeOptions) *DRANode {
	t.Helper()
	n := &DRANode{Node: &Node{Layout: l, ConfDir: l.Path("cdi-conf"), PluginDir: l.Bin},
		Checkpoint: l.Path("cdi-state", "dra-claims.json"), Options: o}
	bindFresh(t, l, kubeletDir, cdiSpecDir)
	// The kubelet-plugin library serves its socket here, and does not
	// make the directory.
	if err := os.MkdirAll(filepath.Join(kubeletDir, "plugins", domain), 0o750); err != nil {
		t.Fatal(err)
	}
	timed(t, "etcd and kube-apiserver", func() { n.Cluster = StartCluster(t, l, Name) })
	if err := n.Cluster.applyDRAExamples(t.Context(), filepath.Join(l.Repo, draExamples)); err != nil {
		t.Fatal(err)
	}
	if o.Apply != nil {
		if err := o.Apply(t.Context(), n.Cluster); err != nil {
			t.Fatal(err)
		}
	}
	controllers := draControllers
	if o.Controllers != "" {
		controllers += "," + o.Controllers
	}
	timed(t, "kube-controller-manager and kube-scheduler", func() { startControllers(t, l, n.Cluster, controllers) })
	n.startKubelet(t)
	var err error
	if n.DropIns, err = WriteDropIns(n.ConfDir, l.Path("cdi-state")); err != nil {
		t.Fatal(err)
	}
	n.Offered = map[string]int{"tty": ttysOffered, "camera": len(cameras)}
	if viaDRA {
		delete(n.Offered, "tty")
	}
	n.StartBridge(t, viaDRA)
	timed(t, "the bridge's resources in the Node's allocatable", func() { n.waitResources(t) })
	return n
}

// StartBridge starts the bridge, serving draPool through DRA when viaDRA,
// and waits until the terminals can be had: through DRA, the bridge's
// ResourceSlices list every one; as a device plugin, the kubelet has
// every one free.
func (n *DRANode) StartBridge(t testing.TB, viaDRA bool) {
	t.Helper()
	extra := map[string]string{"dra-checkpoint": n.Checkpoint}
	maps.Copy(extra, n.Options.BridgeFlags)
	if viaDRA {
		extra["dra-pools"] = draPool
	}
	timed(t, "cdi-bridge (to ready)", func() { n.Bridge = StartBridge(t, n.Layout, n.Cluster, Name, n.ConfDir, extra) })
	// Before the bridge stops (cleanups run last first): the kubelet
	// deletes a pod with a claim only once the bridge unprepared it.
	t.Cleanup(func() { n.deleteAllPods(t) })
	timed(t, "the terminals offered", func() {
		var err error
		if viaDRA {
			if _, err = n.waitSlices(t.Context(), ttysOffered, slicesWait); err == nil {
				err = waitDRARegistered(t.Context(), true)
			}
		} else {
			err = n.WaitFree(t.Context(), domain+"/"+draPool, ttysOffered)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}

// StopBridge stops the bridge and waits until the kubelet no longer has
// its DRA driver registered: a new bridge's registration must be the
// kubelet's new one, not the old one it has yet to drop.
func (n *DRANode) StopBridge(t testing.TB) {
	t.Helper()
	if err := n.Bridge.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := waitDRARegistered(t.Context(), false); err != nil {
		t.Fatal(err)
	}
}

// bindFresh binds a new directory of the node's over each of dirs, for the
// length of the test.
func bindFresh(t testing.TB, l Layout, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		if err := bindDir(l.Path("fresh", filepath.Base(dir)), dir); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", dir, err)
			}
		})
	}
}

// applyDRAExamples creates the example DeviceClasses, the claim templates
// in the pods' namespace and the DRA front end's RBAC, bound to the
// bridge's ServiceAccount in the bridge's namespace; and oneTerminal,
// which the examples lack.
func (c *Cluster) applyDRAExamples(ctx context.Context, dir string) error {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	for _, file := range []string{"deviceclasses.yaml", "claimtemplates.yaml", "rbac.yaml"} {
		objs, err := readDocuments(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := c.create(ctx, mapper, filepath.Join(dir, file), obj, PodNamespace); err != nil {
				return err
			}
		}
	}
	_, err := c.Client.ResourceV1().ResourceClaimTemplates(PodNamespace).Create(ctx, oneTerminal(), metav1.CreateOptions{})
	return err
}

// Claim templates the test's pods name: two of the example's, one of the
// test's.
const (
	twoTerminals   = "two-terminals"
	oneTerminalTpl = "one-terminal"
)

// oneTerminal is a claim template for one device of the examples'
// terminal class.
func oneTerminal() *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: oneTerminalTpl},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "tty", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "tty-generic.cdi.local"},
			}}},
		}},
	}
}

// nodeSlices lists the ResourceSlices of the bridge's driver on the node.
func (n *DRANode) nodeSlices(ctx context.Context) ([]resourceapi.ResourceSlice, error) {
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: Name, resourceapi.ResourceSliceSelectorDriver: domain}
	list, err := n.Cluster.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the node's ResourceSlices: %w", err)
	}
	return list.Items, nil
}

// poolDevices maps the DRA device names of draPool's slices on the node to
// the inventory ids their id attribute holds.
func poolDevices(slices []resourceapi.ResourceSlice) map[string]string {
	out := map[string]string{}
	for _, s := range slices {
		if s.Spec.Pool.Name != Name+"/"+draPool {
			continue
		}
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes["id"]; ok && a.StringValue != nil {
				out[d.Name] = *a.StringValue
			} else {
				out[d.Name] = ""
			}
		}
	}
	return out
}

// waitSlices waits up to within until the node's slices of draPool list
// count devices, each with its inventory id, and returns the slices.
func (n *DRANode) waitSlices(ctx context.Context, count int, within time.Duration) ([]resourceapi.ResourceSlice, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	last := "no slices"
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		got, err := n.nodeSlices(ctx)
		if err != nil {
			last = err.Error()
			continue
		}
		devices := poolDevices(got)
		if len(devices) == count && !slices.Contains(slices.Collect(maps.Values(devices)), "") {
			return got, nil
		}
		last = fmt.Sprintf("%d slices, pool %s/%s has devices %v", len(got), Name, draPool, devices)
	}
	return nil, fmt.Errorf("the bridge's slices not there within %v: %s", within, last)
}

// Bounds of the wait for the slices after a kubelet restart: for the
// kubelet's deletion of them, which it starts as it starts, then for the
// bridge to publish them again (about a second after the deletion;
// testDRAKubeletRestart holds it to republishBound, and this wait is long
// enough to see by how much a slow bridge misses it).
const (
	wipeWait      = 15 * time.Second
	republishWait = 2 * time.Minute
)

// waitRepublished waits until the watch has seen a slice of the node
// deleted (or wipeWait passed without one), then until the slices list
// every terminal again, and returns them.
func (n *DRANode) waitRepublished(ctx context.Context, sw *sliceWatch) ([]resourceapi.ResourceSlice, error) {
	wctx, cancel := context.WithTimeout(ctx, wipeWait)
	defer cancel()
	for ; wctx.Err() == nil; time.Sleep(pollInterval) {
		if slices.ContainsFunc(sw.Events(), func(e sliceEvent) bool { return e.Type == watch.Deleted }) {
			break
		}
	}
	return n.waitSlices(ctx, ttysOffered, republishWait)
}

// newScheduledPod is newPod for the scheduler to place on the node (it
// allocates the claims then), its container with the claim of template
// when template is set.
func newScheduledPod(name, reportDir string, limits map[string]int64, template string) *corev1.Pod {
	p := newPod(name, "", reportDir, limits)
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: Name}
	if template != "" {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: &template}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "devices"}}
	}
	return p
}

// The kubelet's view of the bridge's DRA driver: its registration socket
// (kubeletplugin's <driver>-reg.sock) in the kubelet's plugin manager,
// from the kubelet's metrics, served on its port with the self-signed
// certificate it made for the node's name.
const (
	kubeletMetrics  = "https://127.0.0.1:10250/metrics"
	kubeletCert     = kubeletDir + "/pki/kubelet.crt"
	draRegistration = kubeletDir + "/plugins_registry/" + domain + "-reg.sock"
	// registrationWait bounds the wait for the kubelet to register the
	// driver, or to drop it: its plugin manager looks every second.
	registrationWait = 30 * time.Second
)

// waitDRARegistered waits until the kubelet has the bridge's DRA driver
// registered, or, when !want, no longer has it. A claim prepared before
// the kubelet registered the driver fails ("DRA driver cdi.local is not
// registered"), and the kubelet tries that pod again only at its next
// sync of it, a minute later.
func waitDRARegistered(ctx context.Context, want bool) error {
	return waitPluginRegistered(ctx, draRegistration, want)
}

// waitPluginRegistered is waitDRARegistered for the registration socket
// socket: a bridge's with --pod-uid is of its pod.
func waitPluginRegistered(ctx context.Context, socket string, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, registrationWait)
	defer cancel()
	var last string
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		got, err := kubeletPluginRegistered(ctx, socket)
		if err == nil && got == want {
			return nil
		}
		last = fmt.Sprintf("registered: %v (%v)", got, err)
	}
	return fmt.Errorf("the kubelet's registration of %s not %v within %v: %s", socket, want, registrationWait, last)
}

// kubeletPluginRegistered reports whether the kubelet's plugin manager has
// registered the plugin of socket: it is in its actual state of the world
// (plugin_manager_total_plugins).
func kubeletPluginRegistered(ctx context.Context, socket string) (bool, error) {
	client, err := kubeletClient()
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kubeletMetrics, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return false, fmt.Errorf("the kubelet's metrics: %w", err)
	}
	for _, m := range families["plugin_manager_total_plugins"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["socket_path"] == socket && labels["state"] == "actual_state_of_world" && m.GetGauge().GetValue() > 0 {
			return true, nil
		}
	}
	return false, nil
}

// kubeletClient is an HTTPS client that trusts the kubelet's self-signed
// certificate for the node's name.
func kubeletClient() (*http.Client, error) {
	pem, err := os.ReadFile(kubeletCert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", kubeletCert)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: Name}}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, nil
}

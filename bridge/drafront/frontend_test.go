package drafront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// wait bounds the tests' waits for the API server and the plugins.
const wait = time.Minute

// pluginDir holds the real generic-tty plugin, built once.
var pluginDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &pluginDir, "github.com/cdiexec/cdi/plugins/generic-tty")
}

// rig is a FrontEnd's surroundings: a drop-in of the fixture's terminals
// tty43 and tty44, its checkpoint and CDI spec directory, and the
// kubelet's plugin directories.
type rig struct {
	confDir, checkpoint, cdiDir string
	pluginDir, registrarDir     string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{confDir: t.TempDir(), checkpoint: filepath.Join(t.TempDir(), "claims.json"), cdiDir: t.TempDir()}
	dra := kubelettest.SocketDir(t, "dra")
	r.pluginDir, r.registrarDir = filepath.Join(dra, "plugin"), filepath.Join(dra, "registry")
	if err := os.Mkdir(r.registrarDir, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"root": exectest.FixtureRoot(t), "stateDir": exectest.StateDir(t), "num_system_reserved": 42})
	if err := os.MkdirAll(filepath.Join(r.confDir, "tty.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.confDir, "tty.d", "generic.conf"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// config is the Config of a front end of node n1 in r, with client.
func (r *rig) config(t *testing.T, client kubernetes.Interface) Config {
	t.Helper()
	dir, err := cdispec.Open(r.cdiDir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	return Config{NodeName: "n1", Driver: "cdi.test", Client: client, CDI: dir, Checkpoint: r.checkpoint,
		PluginDir: r.pluginDir, RegistrarDir: r.registrarDir, Store: local.New(filepath.Join(t.TempDir(), "instances.json")),
		Logger: slog.New(slog.DiscardHandler)}
}

// discover is the drop-in's pools, as discovery hands them over.
func (r *rig) discover(t *testing.T) []discovery.Pool {
	t.Helper()
	pools, err := (&discovery.Discoverer{ConfDir: r.confDir, PluginDirs: []string{pluginDir}}).Discover(t.Context())
	if err != nil || len(pools) != 1 {
		t.Fatalf("discovery: %v, %v", pools, err)
	}
	return pools
}

// Against a real API server, as a user with the shipped DRA RBAC only,
// and the kubelet's PodResources: a checkpoint cut short is set aside
// (kept, a Warning Event of the Node, OnSetAside told) and does not stop
// the front end; once the first discovery has set the pools, the claims
// are rebuilt before the driver registers: a claim the API server has
// allocated here and reserved is prepared again (the plugin holds it,
// the checkpoint records it, its CDI spec is written), an ADD of a claim
// the API server no longer has is released; then the node's slice is
// published and the driver's registration socket served.
func TestFrontEnd(t *testing.T) {
	env := apitest.Start(t, apitest.Options{Users: []apitest.User{{Name: "bridge"}}})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	schedtest.BindDRARole(t, admin, "bridge")
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := allocatedClaim(t, admin, "running", "n1/tty-generic", "tty43")
	cfg, err := env.ConfigFor("bridge")
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t)
	writeFile(t, r.checkpoint, `{"version":1,"claims":{"gone":{"namespace":"ns","name":"gone","devi`)
	pools := r.discover(t)
	addAs(t, pools[0], "0f1e2d3c-gone-0", "tty44")
	var setAside []string
	c := r.config(t, client)
	c.Kubelet = kubeletNaming(t, "running")
	c.OnSetAside = func(reason string) { setAside = append(setAside, reason) }
	f, err := Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Registered(); !errors.Is(err, dra.ErrNotRegistered) {
		t.Errorf("before the first discovery Registered = %v, want ErrNotRegistered", err)
	}
	_, viaDRA := Split(pools, ParsePools("tty-generic"))
	f.SetPools(viaDRA)
	waitRegistered(t, r, "the registration socket")
	ckpt, err := dradevices.LoadCheckpoint(r.checkpoint)
	if err != nil || fmt.Sprint(ckpt.UIDs()) != fmt.Sprint([]types.UID{running.UID}) {
		t.Errorf("when the driver registers, the checkpoint records %v (%v), want the running claim's %s", ckpt.UIDs(), err, running.UID)
	}
	if got := fmt.Sprint(listed(t, pools[0])); got != fmt.Sprint([]string{string(running.UID) + "-0"}) {
		t.Errorf("when the driver registers, the plugin holds %s, want the running claim's ADD alone", got)
	}
	if _, err := os.Stat(filepath.Join(r.cdiDir, dradevices.SpecFile(running.UID))); err != nil {
		t.Errorf("the running claim's CDI spec: %v", err)
	}
	asides, _ := filepath.Glob(r.checkpoint + ".unreadable-*")
	if len(asides) != 1 || fmt.Sprint(setAside) != "[unreadable]" {
		t.Errorf("set aside as %v, told %v; want one file kept, told unreadable", asides, setAside)
	}
	waitFor(t, "the Warning Event", func() bool {
		l, err := admin.EventsV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 1 && l.Items[0].Regarding.Name == "n1" && l.Items[0].Type == corev1.EventTypeWarning
	})
	waitFor(t, "the node's slice of its two terminals", func() bool {
		l, err := admin.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: "spec.driver=cdi.test"})
		return err == nil && len(l.Items) == 1 && l.Items[0].Spec.Pool.Name == "n1/tty-generic" && len(l.Items[0].Spec.Devices) == 2
	})
}

// kubeletNaming is the kubelet's PodResources, whose pods name the
// driver's claims of names in namespace default.
func kubeletNaming(t *testing.T, names ...string) reclaim.Lister {
	t.Helper()
	kubelet, client := kubelettest.StartPodResources(t)
	var claims []kubelettest.HeldClaim
	for _, n := range names {
		claims = append(claims, kubelettest.HeldClaim{Namespace: metav1.NamespaceDefault, Name: n, Driver: "cdi.test"})
	}
	kubelet.SetClaims(claims...)
	return client
}

// allocatedClaim creates a claim in namespace default, allocated with
// device of pool and reserved for a pod.
func allocatedClaim(t *testing.T, client kubernetes.Interface, name, pool, device string) *resourceapi.ResourceClaim {
	t.Helper()
	claims := client.ResourceV1().ResourceClaims(metav1.NamespaceDefault)
	c, err := claims.Create(t.Context(), &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "tty", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "tty.cdi.local"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "tty", Driver: "cdi.test", Pool: pool, Device: device}}}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "0a1b2c3d"}}
	if c, err = claims.UpdateStatus(t.Context(), c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// addAs runs ADD pinned to device on pool's plugin, as a claim's Prepare
// before the checkpoint was lost would have.
func addAs(t *testing.T, pool discovery.Pool, requestID, device string) {
	t.Helper()
	req, _ := spec.ParseRequest(pool.Resource + ":1")
	if _, err := pool.Plugin.Add(t.Context(), invoke.AddRequest{Request: req, RequestID: requestID, Devices: []string{device}}); err != nil {
		t.Fatal(err)
	}
}

// listed is the request-ids pool's plugin holds, sorted.
func listed(t *testing.T, pool discovery.Pool) []string {
	t.Helper()
	l, err := pool.Plugin.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range l.Allocations {
		ids = append(ids, a.RequestID)
	}
	slices.Sort(ids)
	return ids
}

func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	err := kwait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, wait, true, func(context.Context) (bool, error) { return done(), nil })
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// Start refuses a Config that lacks what it needs, and a checkpoint it
// cannot read.
func TestStartRefuses(t *testing.T) {
	r := newRig(t)
	good := r.config(t, fake.NewClientset())
	for name, tc := range map[string]struct {
		edit func(*Config)
		want error
	}{
		"no client": {func(c *Config) { c.Client = nil }, ErrConfig},
		"no store":  {func(c *Config) { c.Store = nil }, ErrConfig},
		"a checkpoint that cannot be moved aside": {func(c *Config) { c.Checkpoint = "/" }, dradevices.ErrCheckpoint},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			if f, err := Start(t.Context(), cfg); !errors.Is(err, tc.want) || f != nil {
				t.Errorf("Start = %v, %v; want %v", f, err, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// heldStore is a store whose Observe calls wait until release is
// closed; observing and observed count the calls begun and returned.
type heldStore struct {
	instance.Store
	release             chan struct{}
	observing, observed atomic.Int64
}

func (s *heldStore) Observe(ctx context.Context, node, config string, seen []instance.Instance) error {
	s.observing.Add(1)
	defer s.observed.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Observe(ctx, node, config, seen)
}

// The node's slices hold no shared device, so their first publish and
// the driver's registration do not wait for the Instance store: with
// the store's Observe held, the slice is published and the driver
// registers; the store is told once it answers.
func TestFirstPublishDoesNotWaitForTheStore(t *testing.T) {
	admin := adminOfNode(t)
	r := newRig(t)
	c := r.config(t, admin)
	store := &heldStore{Store: c.Store, release: make(chan struct{})}
	c.Store = store
	f, err := Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	_, viaDRA := Split(r.discover(t), ParsePools("tty-generic"))
	f.SetPools(viaDRA)
	waitSliceOfTwo(t, admin, "the node's slice, while the store is held")
	waitRegistered(t, r, "the registration socket, while the store is held")
	if store.observing.Load() != 1 || store.observed.Load() != 0 {
		t.Errorf("Observe begun %d times, returned %d; want 1 held", store.observing.Load(), store.observed.Load())
	}
	close(store.release)
	waitFor(t, "the store told of the pool", func() bool { return store.observed.Load() == 1 })
}

// A pool the first discovery missed (its plugin's INFO failed) has its
// claims rebuilt when it is served: a claim the API server has
// allocated with its device is prepared again, and an ADD of a claim it
// no longer has is released, before its slices are published.
func TestPoolServedAnewIsRebuilt(t *testing.T) {
	admin := adminOfNode(t)
	running := allocatedClaim(t, admin, "running", "n1/tty-generic", "tty43")
	r := newRig(t)
	pools := r.discover(t)
	addAs(t, pools[0], "0f1e2d3c-gone-0", "tty44")
	c := r.config(t, admin)
	c.Kubelet = kubeletNaming(t, "running")
	f, err := Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	f.SetPools([]discovery.Pool{}) // the drop-in's INFO failed
	waitRegistered(t, r, "the registration socket")
	if got := fmt.Sprint(listed(t, pools[0])); got != "[0f1e2d3c-gone-0]" {
		t.Fatalf("with the pool not served the plugin holds %s, want the gone claim's ADD alone", got)
	}
	_, viaDRA := Split(pools, ParsePools("tty-generic"))
	f.SetPools(viaDRA)
	want := fmt.Sprint([]string{string(running.UID) + "-0"})
	waitFor(t, "the running claim prepared, the gone one's ADD released", func() bool { return fmt.Sprint(listed(t, pools[0])) == want })
	if ckpt, err := dradevices.LoadCheckpoint(r.checkpoint); err != nil || fmt.Sprint(ckpt.UIDs()) != fmt.Sprint([]types.UID{running.UID}) {
		t.Errorf("the checkpoint records %v (%v), want the running claim's %s", ckpt.UIDs(), err, running.UID)
	}
	waitSliceOfTwo(t, admin, "the node's slice")
}

// adminOfNode starts an API server with a Node n1 and is its admin's
// client.
func adminOfNode(t *testing.T) kubernetes.Interface {
	t.Helper()
	env := apitest.Start(t, apitest.Options{})
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return admin
}

// waitRegistered waits for the driver's registration socket in r.
func waitRegistered(t *testing.T, r *rig, what string) {
	t.Helper()
	waitFor(t, what, func() bool {
		_, err := os.Stat(filepath.Join(r.registrarDir, "cdi.test-reg.sock"))
		return err == nil
	})
}

// waitSliceOfTwo waits for the node's one slice of the rig's two
// terminals.
func waitSliceOfTwo(t *testing.T, c kubernetes.Interface, what string) {
	t.Helper()
	waitFor(t, what, func() bool {
		l, err := c.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: "spec.driver=cdi.test"})
		return err == nil && len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == 2
	})
}

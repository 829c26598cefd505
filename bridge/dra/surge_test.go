package dra_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/internal/handover"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// The environment of a child holder (holdAndWrite): its kubeconfig,
// node and lock.
const (
	envHolderKubeconfig = "DRA_TEST_HOLDER_KUBECONFIG"
	envHolderNode       = "DRA_TEST_HOLDER_NODE"
	envHolderLock       = "DRA_TEST_HOLDER_LOCK"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHolderKubeconfig) != "" {
		if err := holdAndWrite(); err != nil {
			fmt.Fprintln(os.Stderr, "holder:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// holdAndWrite is a bridge's slices, in a child process, that takes the
// node lock and writes the first slices of a fresh node, and stops
// before the third, saying so on stdout, to be killed.
func holdAndWrite() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(envHolderKubeconfig))
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	l, err := handover.Open(os.Getenv(envHolderLock), handover.Record{DRAPools: []string{"p"}})
	if err != nil {
		return err
	}
	if held, err := l.TryAcquire(); !held || err != nil {
		return fmt.Errorf("the node lock: held %v, %w", held, err)
	}
	s := dra.StartNodeSlices(context.Background(), "cdi.local", os.Getenv(envHolderNode), client,
		func(_ context.Context, err error, msg string) { fmt.Fprintln(os.Stderr, msg, err) }, dra.AfterLock(l.Held()))
	dra.SetBeforeCreate(s, func(created int) {
		if created == 2 {
			fmt.Println("writing")
			select {}
		}
	})
	s.Publish(viewOf(3, "old"))
	select {}
}

// surgeBridge is the slices' side of one of two bridges of a node
// sharing its lock: the old pod's, which holds it, or the new one's,
// which waits.
type surgeBridge struct {
	lock   *handover.Lock
	slices *dra.NodeSlices
}

// startSurgeBridge starts NodeSlices of node after the lock at path,
// taken at once if free, else waited for in the background.
func startSurgeBridge(t *testing.T, client kubernetes.Interface, node, path string) *surgeBridge {
	t.Helper()
	l, err := handover.Open(path, handover.Record{DRAPools: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.TryAcquire()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if !held {
		go func() { _ = l.Acquire(ctx) }()
	}
	s := dra.StartNodeSlices(ctx, "cdi.local", node, client, func(_ context.Context, err error, msg string) {
		t.Logf("%s: %v", msg, err)
	}, dra.AfterLock(l.Held()))
	b := &surgeBridge{lock: l, slices: s}
	t.Cleanup(func() { cancel(); b.stop() })
	return b
}

// stop stops the bridge as cdi-bridge does: its controller, then the
// lock.
func (b *surgeBridge) stop() {
	b.slices.Stop()
	_ = b.lock.Release()
}

// sliceWrites records every write of a node's slices the API server's
// watch reports, from its start.
type sliceWrites struct {
	mu     sync.Mutex
	events []watch.Event
}

func watchSlices(t *testing.T, client kubernetes.Interface, node string) *sliceWrites {
	t.Helper()
	api := client.ResourceV1().ResourceSlices()
	l, err := api.List(t.Context(), metav1.ListOptions{FieldSelector: nodeSelector(node)})
	if err != nil {
		t.Fatal(err)
	}
	// A RetryWatcher: a fresh API server's watch cache may refuse a
	// resourceVersion it has not yet seen, for a while.
	w, err := watchtools.NewRetryWatcherWithContext(t.Context(), l.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = nodeSelector(node)
			return api.Watch(ctx, o)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	sw := &sliceWrites{}
	go func() {
		for ev := range w.ResultChan() {
			sw.mu.Lock()
			sw.events = append(sw.events, ev)
			sw.mu.Unlock()
		}
	}()
	return sw
}

// since counts the events from the nth on, by type, and the slices
// added.
func (w *sliceWrites) since(n int) (counts map[watch.EventType]int, added []string, next int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts = map[watch.EventType]int{}
	for _, ev := range w.events[min(n, len(w.events)):] {
		counts[ev.Type]++
		if s, ok := ev.Object.(*resourceapi.ResourceSlice); ok && ev.Type == watch.Added {
			added = append(added, s.Name)
		}
	}
	return counts, added, len(w.events)
}

func newNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitStarted(t *testing.T, s *dra.NodeSlices) {
	t.Helper()
	select {
	case <-s.Started():
	case <-time.After(time.Minute):
		t.Fatal("the slices' controller did not start")
	}
}

// viewOf is poolOf(n) as a bridge of release sees it: every device has
// the attribute release.
func viewOf(n int, release string) resourceslice.DriverResources {
	res := poolOf(n)
	for _, s := range res.Pools["p"].Slices {
		for i := range s.Devices {
			s.Devices[i].Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"release": {StringValue: ptr.To(release)}}
		}
	}
	return res
}

// TestSurgeFirstSlices: two bridges start on a fresh node, the old
// holding the node's lock: the node gets one set of first slices, the
// holder's, and the new bridge, once the old one stopped, adopts them.
func TestSurgeFirstSlices(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const node = "surge-fresh"
	newNode(t, client, node)
	writes := watchSlices(t, client, node)
	lock := filepath.Join(t.TempDir(), "node.lock")
	old, next := startSurgeBridge(t, client, node, lock), startSurgeBridge(t, client, node, lock)
	three := poolOf(3)
	old.slices.Publish(three)
	next.slices.Publish(three)
	waitStarted(t, old.slices)
	waitForSlices(t, client, node, devicesOf(three))
	time.Sleep(5 * dra.SliceSyncDelay)
	if _, added, _ := writes.since(0); len(added) != 3 {
		t.Errorf("slices created while both run: %q, want 3, one set", added)
	}
	old.stop()
	waitStarted(t, next.slices)
	time.Sleep(5 * dra.SliceSyncDelay)
	waitForSlices(t, client, node, devicesOf(three))
	if _, added, _ := writes.since(0); len(added) != 3 {
		t.Errorf("slices created once the new bridge took over: %q, want the first 3 only", added)
	}
}

// TestSurgeOneWriter: two bridges of one node whose views differ (the
// new release gives each device an attribute of its own): while both
// run, only the holder of the node's lock writes the node's slices; once
// it stops, the other writes its view, one update of each slice.
func TestSurgeOneWriter(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const node = "surge-views"
	newNode(t, client, node)
	writes := watchSlices(t, client, node)
	lock := filepath.Join(t.TempDir(), "node.lock")
	old := startSurgeBridge(t, client, node, lock)
	old.slices.Publish(viewOf(3, "old"))
	waitStarted(t, old.slices)
	waitForAttribute(t, client, node, "old")
	time.Sleep(3 * dra.SliceSyncDelay)
	_, _, settled := writes.since(0)

	next := startSurgeBridge(t, client, node, lock)
	next.slices.Publish(viewOf(3, "new"))
	time.Sleep(10 * time.Second)
	if counts, _, _ := writes.since(settled); len(counts) > 0 {
		t.Errorf("writes of the node's slices while both bridges ran: %v, want none", counts)
	}
	waitForAttribute(t, client, node, "old")

	_, _, handedOver := writes.since(0)
	old.stop()
	waitStarted(t, next.slices)
	waitForAttribute(t, client, node, "new")
	time.Sleep(3 * dra.SliceSyncDelay)
	if counts, _, _ := writes.since(handedOver); counts[watch.Modified] != 3 || len(counts) != 1 {
		t.Errorf("writes once the new bridge took over: %v, want 3 updates, one a slice", counts)
	}
}

// waitForAttribute waits until every device of the node's slices has
// release as its release attribute.
func waitForAttribute(t *testing.T, client kubernetes.Interface, node, release string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		l, err := client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: nodeSelector(node)})
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, s := range l.Items {
			for _, d := range s.Spec.Devices {
				got = append(got, fmt.Sprint(ptr.Deref(d.Attributes["release"].StringValue, "")))
			}
		}
		if len(got) == 3 && got[0] == release && got[1] == release && got[2] == release {
			return
		}
	}
	t.Fatalf("the node's devices' release attributes %q, want %q", got, release)
}

// TestSurgeHolderKilledMidFirstWrite: the old bridge, holding the node's
// lock, is killed (SIGKILL) half-way through the first slices of a fresh
// node, two of three written; the new bridge, which waited, takes the
// lock from the kernel and its controller completes the pool with its
// own view: three slices, the two adopted.
func TestSurgeHolderKilledMidFirstWrite(t *testing.T) {
	env := apitest.Start(t, apitest.Options{})
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const node = "surge-killed"
	newNode(t, client, node)
	writes := watchSlices(t, client, node)
	lock := filepath.Join(t.TempDir(), "node.lock")
	old := exec.Command(os.Args[0], "-test.run=^$")
	old.Env = append(os.Environ(), envHolderKubeconfig+"="+env.Kubeconfig(t, apitest.AdminUser), envHolderNode+"="+node,
		envHolderLock+"="+lock, "GORACE=atexit_sleep_ms=0")
	old.Stderr = os.Stderr
	out, err := old.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Process.Kill(); _ = old.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "writing\n" {
		t.Fatalf("the old bridge said %q, %v", line, err)
	}
	written := sliceNames(t, client, node)
	if len(written) != 2 {
		t.Fatalf("the old bridge wrote %q before it stopped, want 2", written)
	}
	next := startSurgeBridge(t, client, node, lock)
	next.slices.Publish(viewOf(3, "new"))
	time.Sleep(3 * time.Second)
	if counts, _, _ := writes.since(0); len(counts) != 1 || counts[watch.Added] != 2 {
		t.Fatalf("writes of the node's slices while the old bridge held the lock: %v, want its 2 creates only", counts)
	}
	if err := old.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = old.Wait()
	waitStarted(t, next.slices)
	waitForAttribute(t, client, node, "new")
	time.Sleep(3 * dra.SliceSyncDelay)
	waitForAttribute(t, client, node, "new")
	if _, added, _ := writes.since(0); len(added) != 3 {
		t.Errorf("slices created: %q, want 3: two by the old bridge, one by the new", added)
	}
	if now := sliceNames(t, client, node); len(now) != 3 || !slices.Contains(now, written[0]) || !slices.Contains(now, written[1]) {
		t.Errorf("the node's slices %q, want 3, the old bridge's %q among them", now, written)
	}
}

// sliceNames lists the names of the node's slices.
func sliceNames(t *testing.T, client kubernetes.Interface, node string) []string {
	t.Helper()
	l, err := client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{FieldSelector: nodeSelector(node)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range l.Items {
		names = append(names, s.Name)
	}
	return names
}

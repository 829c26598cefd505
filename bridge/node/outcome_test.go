package node

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// When the API server commits a claim but its answer never arrives (here
// a proxy cuts every connection as the response comes back), Allocate
// fails with an unknown outcome; once the API answers again, the claim is
// released within seconds, not left for slot reclaim's five minutes.
//
// Should the cut land before the API server commits, the write is not
// committed, which the outcome must also survive, and the test tries
// again, up to committedTries times, until one is.
func TestUnknownOutcomeIsReleased(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	ns := env.Namespace(t)
	proxy := startCuttingProxy(t, env.Config.Host)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + proxy.addr
	// HTTP/1.1, so that the first bytes back after a request are its
	// answer: over HTTP/2 the API server's own frames (window updates,
	// pings) could set off the cut before the write is committed.
	cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	store := startKubeStore(t, cfg, ns)
	etcd, err := dynamic.NewForConfig(env.Config) // reads what etcd holds, past every cache
	if err != nil {
		t.Fatal(err)
	}
	a, p, _ := setup(t)
	a.Store = store
	in := instance.Instance{Name: instance.Name("tty-t", "tty13", "n1", false), Config: "tty-t", DeviceID: "tty13", Capacity: 1}
	if err := store.Observe(t.Context(), "n1", "tty-t", []instance.Instance{in}); err != nil {
		t.Fatal(err)
	}
	const committedTries = 20
	for try := 1; ; try++ {
		g := grant(p, in, "tty13", strconv.Itoa(try))
		cutAllocate(t, a, proxy, g)
		if usageNow(t, etcd, ns, in.Name, g.Claim.Slot) == g.Claim.Value {
			waitReleased(t, proxy, etcd, ns, in.Name, g.Claim)
			t.Logf("committed on try %d", try)
			return
		}
		if try == committedTries {
			t.Fatalf("no claim was committed before the cut in %d tries", try)
		}
		waitReleased(t, proxy, etcd, ns, in.Name, g.Claim) // a late commit is released all the same
	}
}

// cutAllocate runs Allocate of g with the proxy cutting every answer: it
// must fail with an unknown outcome.
func cutAllocate(t *testing.T, a *Allocator, proxy *cuttingProxy, g Grant) {
	t.Helper()
	proxy.cut.Store(true)
	started := time.Now()
	_, err := a.Allocate(t.Context(), [][]Grant{{g}})
	t.Logf("Allocate failed after %v: %v", time.Since(started).Round(time.Millisecond), err)
	if !errors.Is(err, instance.ErrUnknownOutcome) {
		t.Fatalf("Allocate = %v, want an unknown outcome", err)
	}
}

// waitReleased lets the API answer again and waits until claim's slot is
// free in etcd.
func waitReleased(t *testing.T, proxy *cuttingProxy, etcd dynamic.Interface, ns, name string, claim instance.Claim) {
	t.Helper()
	cut := time.Now()
	proxy.cut.Store(false)
	for u := usageNow(t, etcd, ns, name, claim.Slot); u != ""; u = usageNow(t, etcd, ns, name, claim.Slot) {
		if time.Since(cut) > 15*time.Second {
			t.Fatalf("slot %s still %q %v after the API answers again", claim.Slot, u, time.Since(cut))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("slot %s free %v after the API answered again", claim.Slot, time.Since(cut).Round(time.Millisecond))
}

func startKubeStore(t *testing.T, cfg *rest.Config, ns string) *kube.Store {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := kube.New(ctx, client, ns)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// usageNow is a slot's usage as etcd holds it now.
func usageNow(t *testing.T, etcd dynamic.Interface, ns, name, slot string) string {
	t.Helper()
	obj, err := etcd.Resource(kube.Resource).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := unstructured.NestedString(obj.Object, "spec", "deviceUsage", slot)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// cuttingProxy forwards TCP connections to an upstream address; while cut
// is set, it closes a connection, both ways, as soon as the upstream
// sends anything: a request gets through and is acted on, its answer is
// lost.
type cuttingProxy struct {
	addr string
	cut  atomic.Bool

	mu    sync.Mutex
	conns []net.Conn // to close at the end: client-go keeps idle ones
}

func startCuttingProxy(t *testing.T, upstream string) *cuttingProxy {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{addr: lis.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			wg.Go(func() { p.serve(c, u.Host) })
		}
	})
	return p
}

func (p *cuttingProxy) serve(c net.Conn, upstream string) {
	defer c.Close()
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 && p.cut.Load() {
			return // the answer is lost, and the connection with it
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

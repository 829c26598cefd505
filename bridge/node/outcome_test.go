package node

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
func TestUnknownOutcomeIsReleased(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	ns := env.Namespace(t)
	proxy := startCuttingProxy(t, env.Config.Host)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + proxy.addr
	store := startKubeStore(t, cfg, ns)
	admin := startKubeStore(t, env.Config, ns) // reads what etcd holds
	a, p, _ := setup(t)
	a.Store = store
	in := instance.Instance{Name: instance.Name("tty-t", "tty13", "n1", false), Config: "tty-t", DeviceID: "tty13", Capacity: 1}
	if err := store.Observe(t.Context(), "n1", "tty-t", []instance.Instance{in}); err != nil {
		t.Fatal(err)
	}
	g := grant(p, in, "tty13", "7")

	proxy.cut.Store(true)
	started := time.Now()
	_, err := a.Allocate(t.Context(), [][]Grant{{g}})
	t.Logf("Allocate failed after %v: %v", time.Since(started).Round(time.Millisecond), err)
	if !errors.Is(err, instance.ErrUnknownOutcome) {
		t.Fatalf("Allocate = %v, want an unknown outcome", err)
	}
	if u := usageNow(t, admin, in.Name, g.Claim.Slot); u != g.Claim.Value {
		t.Skipf("the write was not committed before the cut (usage %q): nothing to release this time", u)
	}
	cut := time.Now()
	proxy.cut.Store(false)
	for u := g.Claim.Value; u != ""; u = usageNow(t, admin, in.Name, g.Claim.Slot) {
		if time.Since(cut) > 15*time.Second {
			t.Fatalf("slot %s still %q %v after the API answers again", g.Claim.Slot, u, time.Since(cut))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the claim of the failed Allocate was released %v after the API answered again", time.Since(cut).Round(time.Millisecond))
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

// usageNow is a slot's usage as the API server holds it now.
func usageNow(t *testing.T, s *kube.Store, name, slot string) string {
	t.Helper()
	all, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if in.Name == name {
			return in.Usage[slot]
		}
	}
	return ""
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

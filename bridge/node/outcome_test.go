package node

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
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
// a proxy drops every answer), Allocate fails with an unknown outcome;
// once the API answers again, the claim is released within seconds, not
// left for slot reclaim's five minutes.
//
// Should the store's write never be sent (the answer to a read before it
// dropped), nothing is committed, which the outcome must also survive,
// and the test tries again, up to committedTries times, until a claim is.
func TestUnknownOutcomeIsReleased(t *testing.T) {
	env := apitest.StartWithInstances(t, apitest.Options{})
	ns := env.Namespace(t)
	proxy := startCuttingProxy(t, env.Config)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host, cfg.TLSClientConfig = proxy.url, rest.TLSClientConfig{CAData: proxy.caPEM}
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
		g := testGrant(p, in, "tty13", strconv.Itoa(try))
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
func cutAllocate(t *testing.T, a *allocator, proxy *cuttingProxy, g grant) {
	t.Helper()
	proxy.cut.Store(true)
	started := time.Now()
	_, err := a.Allocate(t.Context(), [][]grant{{g}})
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
	s, err := kube.New(ctx, client, ns, kube.AllPools)
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

// cuttingProxy is an HTTPS proxy in front of the API server. While cut is
// set, it forwards each request, and once the API server has answered (a
// write is committed by then) it closes the client's connection without
// passing a byte of the answer on: the request is acted on, its answer is
// lost. It ends TLS itself so as to cut after the answer: a proxy of bare
// TCP sees only bytes, and on a new connection the first bytes back are
// the TLS handshake's, which come before the request is even sent.
type cuttingProxy struct {
	url   string
	caPEM []byte // its certificate, for the client to trust
	cut   atomic.Bool
}

// errCut marks an answer the proxy drops.
var errCut = errors.New("answer cut")

// startCuttingProxy starts a cuttingProxy to the API server of upstream,
// which it reaches with upstream's credentials.
func startCuttingProxy(t *testing.T, upstream *rest.Config) *cuttingProxy {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{}
	forward := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1, // watches stream through
		ModifyResponse: func(resp *http.Response) error {
			if p.cut.Load() {
				return errCut
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if !errors.Is(err, errCut) {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		},
	}
	srv := httptest.NewTLSServer(forward)
	t.Cleanup(srv.Close)
	p.url = srv.URL
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return p
}

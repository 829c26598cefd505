package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
)

func host(t *testing.T, args string) (*engine.Host, *bytes.Buffer) {
	t.Helper()
	cfg, err := spec.ParseConfig([]byte(`{"cdiVersion":"0.1.0","name":"cameras","type":"camera","plugin":"endpoint","args":` + args + `}`))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	return &engine.Host{Config: cfg, Root: "/", Stderr: &stderr}, &stderr
}

// noDial fails the test if a probe is attempted.
func noDial(t *testing.T) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		t.Errorf("unexpected probe of %s", addr)
		return nil, errors.New("no network in this test")
	}
}

func TestDiscoverWithoutProbe(t *testing.T) {
	h, stderr := host(t, `{"endpoints":[
		{"id":"front-door","url":"rtsp://admin:secret@192.0.2.10/stream1","env":{"CAMERA_CODEC":"h264"},"properties":{"site":"hq"}},
		{"id":"plc.1","url":"opc.tcp://192.0.2.20:4840","properties":{"url":"shown as given"}},
		{"id":"odd","url":"foo://192.0.2.30"}]}`)
	inv, err := discover(h, noDial(t))
	if err != nil {
		t.Fatal(err)
	}
	rs := spec.ResourceSpec{Type: "camera"}
	want := []engine.Device{
		{ID: "front-door", Resource: rs, Shared: true, Healthy: true,
			Env:        map[string]string{"CAMERA_URL": "rtsp://admin:secret@192.0.2.10/stream1", "CAMERA_ID": "front-door", "CAMERA_CODEC": "h264"},
			Properties: map[string]string{"site": "hq", "url": "rtsp://admin:xxxxx@192.0.2.10/stream1"}},
		{ID: "plc.1", Resource: rs, Shared: true, Healthy: true,
			Env:        map[string]string{"CAMERA_URL": "opc.tcp://192.0.2.20:4840", "CAMERA_ID": "plc.1"},
			Properties: map[string]string{"url": "shown as given"}},
		{ID: "odd", Resource: rs, Shared: true, Healthy: true,
			Env:        map[string]string{"CAMERA_URL": "foo://192.0.2.30", "CAMERA_ID": "odd"},
			Properties: map[string]string{"url": "foo://192.0.2.30"}},
	}
	if !reflect.DeepEqual(inv.Devices, want) || !reflect.DeepEqual(inv.Resources, []spec.ResourceSpec{rs}) {
		t.Fatalf("got  %+v\nwant %+v", inv, want)
	}
	if stderr.Len() > 0 {
		t.Errorf("unexpected diagnostics: %s", stderr)
	}
}

func TestDiscoverOptions(t *testing.T) {
	tests := []struct {
		name, args string
		ids        []string
		env        map[string]string // of the first device
	}{
		{"no endpoints arg", `{}`, nil, nil},
		{"empty list", `{"endpoints":[]}`, nil, nil},
		{"null list", `{"endpoints":null}`, nil, nil},
		{"own prefix", `{"envPrefix":"CAM_0","endpoints":[{"id":"a","url":"http://192.0.2.1"}]}`, []string{"a"},
			map[string]string{"CAM_0_URL": "http://192.0.2.1", "CAM_0_ID": "a"}},
		{"probe off", `{"probe":{"tcp":false},"endpoints":[{"id":"a","url":"x://192.0.2.1"}]}`, []string{"a"},
			map[string]string{"CAMERA_URL": "x://192.0.2.1", "CAMERA_ID": "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := host(t, tt.args)
			inv, err := discover(h, noDial(t))
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range inv.Devices {
				ids = append(ids, d.ID)
			}
			if !reflect.DeepEqual(ids, tt.ids) || len(inv.Resources) != 1 {
				t.Fatalf("ids %v resources %v, want %v", ids, inv.Resources, tt.ids)
			}
			if len(ids) > 0 && !reflect.DeepEqual(inv.Devices[0].Env, tt.env) {
				t.Fatalf("env %v, want %v", inv.Devices[0].Env, tt.env)
			}
		})
	}
}

// TestProbeLoopback probes real sockets, all on 127.0.0.1: one listening,
// one whose listener has been closed again.
func TestProbeLoopback(t *testing.T) {
	openAddr, closedAddr := loopbackPorts(t)
	h, stderr := host(t, `{"probe":{"tcp":true,"timeoutMs":2000},"endpoints":[
		{"id":"up","url":"rtsp://`+openAddr+`/s"},
		{"id":"down","url":"http://`+closedAddr+`/"}]}`)
	var d net.Dialer
	inv, err := discover(h, d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	if !inv.Devices[0].Healthy || inv.Devices[1].Healthy {
		t.Fatalf("healthy: up %v, down %v; want true, false", inv.Devices[0].Healthy, inv.Devices[1].Healthy)
	}
	if !strings.Contains(stderr.String(), "down is unhealthy") || strings.Contains(stderr.String(), "up is") {
		t.Errorf("stderr %q", stderr)
	}
}

// loopbackPorts returns two TCP addresses on 127.0.0.1: one listening
// until the test ends, one whose listener has been closed again.
func loopbackPorts(t *testing.T) (openAddr, closedAddr string) {
	t.Helper()
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	return open.Addr().String(), closed.Addr().String()
}

// TestProbeAddresses checks the address each URL is probed at, without
// any network: the dialer records and refuses.
func TestProbeAddresses(t *testing.T) {
	var mu sync.Mutex
	var got []string
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, network+" "+addr)
		return nil, errors.New("refused by the test")
	}
	h, _ := host(t, `{"probe":{"tcp":true},"endpoints":[
		{"id":"a","url":"rtsp://192.0.2.1/x"},
		{"id":"b","url":"RTSPS://192.0.2.2"},
		{"id":"c","url":"opc.tcp://[2001:db8::1]/"},
		{"id":"d","url":"https://cam.example"},
		{"id":"e","url":"http://192.0.2.5:8080/"},
		{"id":"f","url":"custom://192.0.2.6:9000"}]}`)
	inv, err := discover(h, dial)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := []string{"tcp 192.0.2.1:554", "tcp 192.0.2.2:322", "tcp 192.0.2.5:8080", "tcp 192.0.2.6:9000", "tcp [2001:db8::1]:4840", "tcp cam.example:443"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("probed %v, want %v", got, want)
	}
	for _, d := range inv.Devices {
		if d.Healthy {
			t.Errorf("%s healthy although its probe failed", d.ID)
		}
	}
}

// TestProbesRunConcurrently makes every probe wait until maxParallelProbes
// of them are in flight at once: run one after another, each would time
// out instead. It also checks that no more than that many run at once.
func TestProbesRunConcurrently(t *testing.T) {
	const n = maxParallelProbes + 36
	var mu sync.Mutex
	inflight, peak := 0, 0
	full := make(chan struct{})
	var fill sync.Once
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		inflight++
		peak = max(peak, inflight)
		if inflight == maxParallelProbes {
			fill.Do(func() { close(full) })
		}
		mu.Unlock()
		defer func() { mu.Lock(); inflight--; mu.Unlock() }()
		select {
		case <-full:
			c1, c2 := net.Pipe()
			c2.Close()
			return c1, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var eps []string
	for i := range n {
		eps = append(eps, `{"id":"cam`+strconv.Itoa(i)+`","url":"rtsp://192.0.2.1/`+strconv.Itoa(i)+`"}`)
	}
	h, stderr := host(t, `{"probe":{"tcp":true,"timeoutMs":10000},"endpoints":[`+strings.Join(eps, ",")+`]}`)
	inv, err := discover(h, dial)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if !d.Healthy {
			t.Fatalf("%s unhealthy: probes did not overlap (%s)", d.ID, stderr)
		}
	}
	if peak != maxParallelProbes {
		t.Fatalf("peak of %d probes in flight, want %d", peak, maxParallelProbes)
	}
}

func TestBadArgs(t *testing.T) {
	for _, args := range []string{
		`{"endpoints":{}}`,
		`{"endpoints":[{"id":"a","url":"rtsp://h","port":1}]}`,
		`{"endpoints":[{"id":"-a","url":"rtsp://h"}]}`,
		`{"endpoints":[{"id":"lobby-","url":"rtsp://h"}]}`, // CDI names end with a letter or digit
		`{"endpoints":[{"id":"lobby.","url":"rtsp://h"}]}`,
		`{"endpoints":[{"id":"lobby_","url":"rtsp://h"}]}`,
		`{"endpoints":[{"id":"lobby:","url":"rtsp://h"}]}`,
		`{"endpoints":[{"url":"rtsp://h"}]}`,
		`{"endpoints":[{"id":"a","url":"rtsp://h"},{"id":"a","url":"rtsp://g"}]}`,
		`{"endpoints":[{"id":"a","url":"10.0.0.5/stream"}]}`,
		`{"endpoints":[{"id":"a","url":"rtsp://"}]}`,
		`{"endpoints":[{"id":"a","url":"rtsp://h:port"}]}`,
		`{"endpoints":[{"id":"a","url":"rtsp://h","env":{"1X":"v"}}]}`,
		`{"endpoints":[{"id":"a","url":"rtsp://h","env":{"CAMERA_URL":"v"}}]}`,
		`{"endpoints":[{"id":"a","url":"rtsp://h","env":{"X":1}}]}`,
		`{"envPrefix":""}`,
		`{"envPrefix":"9A"}`,
		`{"envPrefix":5}`,
		`{"probe":true}`,
		`{"probe":{"tcp":true,"timeout":5}}`,
		`{"probe":{"tcp":true,"timeoutMs":0}}`,
		`{"probe":{"tcp":true,"timeoutMs":99999}}`,
		`{"probe":{"tcp":true,"timeoutMs":1.5}}`,
		`{"probe":{"tcp":true},"endpoints":[{"id":"a","url":"foo://192.0.2.1/"}]}`,
		`{"probe":{"tcp":true},"endpoints":[{"id":"a","url":"rtsp://192.0.2.1:0/"}]}`,
	} {
		t.Run(args, func(t *testing.T) {
			h, _ := host(t, args)
			_, err := discover(h, noDial(t))
			if spec.CodeOf(err) != spec.CodeInvalidConfig {
				t.Fatalf("error %v, want code %d", err, spec.CodeInvalidConfig)
			}
		})
	}
}

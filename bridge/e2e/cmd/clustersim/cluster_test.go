package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestClusterOptionsCheck(t *testing.T) {
	ok := clusterOptions{nodes: 50, instances: 200, claims: 500, capacity: 4, inFlight: 8}
	tests := []struct {
		name  string
		edit  func(*clusterOptions)
		valid bool
	}{
		{"defaults", func(*clusterOptions) {}, true},
		{"no simulation", func(o *clusterOptions) { *o = clusterOptions{} }, true},
		{"one node cannot sweep another", func(o *clusterOptions) { o.nodes = 1 }, false},
		{"no claims in flight", func(o *clusterOptions) { o.inFlight = 0 }, false},
		{"3/4 of the slots", func(o *clusterOptions) { o.claims = 600 }, true},
		{"more than 3/4 of the slots", func(o *clusterOptions) { o.claims = 601 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.edit(&o)
			if err := o.check(); (err == nil) != tt.valid {
				t.Fatalf("check(%+v) = %v, want valid %v", o, err, tt.valid)
			}
		})
	}
}

// TestRequests sends each kind of request through the counting transport
// and reads a watch stream of three events.
func TestRequests(t *testing.T) {
	const stream = "{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n{\"type\":\"DELETED\"}\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			io.WriteString(w, stream)
			return
		}
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	var r requests
	client := &http.Client{Transport: r.wrap(http.DefaultTransport)}
	base := srv.URL + "/apis/cdi.local/v1alpha1/namespaces/ns/instances"
	for _, req := range []struct{ method, url string }{
		{http.MethodGet, base}, {http.MethodGet, base + "?watch=true"}, {http.MethodGet, base + "/cam-1"},
		{http.MethodPut, base + "/cam-1"}, {http.MethodPost, base}, {http.MethodDelete, base + "/cam-1"},
	} {
		hr, err := http.NewRequestWithContext(t.Context(), req.method, req.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	got := r.snapshot()
	want := [numKinds]int64{reqGet: 1, reqList: 1, reqWatch: 1, reqWrite: 3}
	if got.n != want {
		t.Errorf("requests by kind = %v, want %v", got.n, want)
	}
	if got.events != 3 {
		t.Errorf("watch events = %d, want 3", got.events)
	}
	if got.bytes[reqWatch] != int64(len(stream)) || got.bytes[reqWrite] != 6 {
		t.Errorf("bytes read by kind = %v, want %d of the watch, 6 of the writes", got.bytes, len(stream))
	}
	if d := got.sub(got); d != (requestCounts{}) {
		t.Errorf("a snapshot less itself = %+v, want zero", d)
	}
}

// TestRun runs the simulation small, so that it cannot rot. Without etcd
// it says it skipped, unless CI is set.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and a kube-apiserver")
	}
	var out bytes.Buffer
	o := clusterOptions{nodes: 3, instances: 10, claims: 10, capacity: 4, inFlight: 4, others: 100, startup: 50}
	if err := run(t.Context(), o, &out, t.Output()); err != nil {
		t.Fatalf("%v\noutput so far:\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "SKIPPED") {
		t.Skip(strings.TrimSpace(out.String()))
	}
	if !strings.Contains(out.String(), clusterTitle) {
		t.Errorf("the output lacks %q:\n%s", clusterTitle, out.String())
	}
	// A node serving a local pool lists its 8 Instances and hears none of
	// the 100 others' writes.
	if !regexp.MustCompile(`(?m)^scoped +heap .* / 0 +target: .* met$`).MatchString(out.String()) {
		t.Errorf("the scoped phase missed its target:\n%s", out.String())
	}
	// A node's first discovery of 50 new devices writes 50 Instances and
	// its Presence, nothing more.
	if !regexp.MustCompile(`(?m)^startup +requests .* 51 writes, 0 conflicts +met$`).MatchString(out.String()) {
		t.Errorf("the start-up phase missed its target:\n%s", out.String())
	}
}

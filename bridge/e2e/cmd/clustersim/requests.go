package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// requestKind sorts a client's API requests as the cluster table does.
type requestKind int

const (
	reqGet   requestKind = iota // one object
	reqList                     // a collection (Instances or Presences), once
	reqWatch                    // the collection, streamed
	reqWrite                    // PUT, PATCH, POST, DELETE
	numKinds
)

// requests counts one client's API requests by kind, the bytes of their
// responses as they are read, and the events of its watch streams. It is
// the client's transport (rest.Config.Wrap), so that it sees every request
// the store makes, the informer's included, and nothing else's.
type requests struct {
	n, bytes [numKinds]atomic.Int64
	events   atomic.Int64
}

// requestCounts are a snapshot of requests, or a sum of them.
type requestCounts struct {
	n, bytes [numKinds]int64
	events   int64
}

func (r *requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		kind := kindOf(req)
		r.n[kind].Add(1)
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, r: r, kind: kind}
		}
		return resp, err
	})
}

func (r *requests) snapshot() requestCounts {
	var c requestCounts
	for k := range numKinds {
		c.n[k], c.bytes[k] = r.n[k].Load(), r.bytes[k].Load()
	}
	c.events = r.events.Load()
	return c
}

func (c requestCounts) add(d requestCounts) requestCounts {
	for k := range numKinds {
		c.n[k] += d.n[k]
		c.bytes[k] += d.bytes[k]
	}
	c.events += d.events
	return c
}

func (c requestCounts) sub(d requestCounts) requestCounts {
	for k := range numKinds {
		d.n[k], d.bytes[k] = -d.n[k], -d.bytes[k]
	}
	d.events = -d.events
	return c.add(d)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func kindOf(req *http.Request) requestKind {
	q := req.URL.Query()
	switch {
	case req.Method != http.MethodGet:
		return reqWrite
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		return reqWatch
	case strings.HasSuffix(req.URL.Path, "/"+kube.Resource.Resource), strings.HasSuffix(req.URL.Path, "/"+kube.PresenceResource.Resource):
		return reqList
	}
	return reqGet
}

// countingBody counts what is read of a response. The API server writes
// a watch stream as one JSON object per event, each ending in a newline
// (its objects themselves contain none), so the newlines are the events.
type countingBody struct {
	io.ReadCloser
	r    *requests
	kind requestKind
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.r.bytes[b.kind].Add(int64(n))
	if b.kind == reqWatch {
		b.r.events.Add(int64(bytes.Count(p[:n], []byte{'\n'})))
	}
	return n, err
}

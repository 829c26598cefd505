package bench

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// verb is how the DRA table sorts a client's API requests: a GET is one
// object, a list of a collection or a watch on it; the others are writes.
type verb int

const (
	verbGet verb = iota
	verbList
	verbWatch
	verbPost
	verbPut
	verbPatch
	verbDelete
	numVerbs
)

var verbNames = [numVerbs]string{"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"}

// requestCounter counts one client's API requests by verb, the bytes of
// their bodies as the transport reads them (what the client sent) and the
// bytes of the responses as the client reads them. It is the client's
// transport (rest.Config.Wrap), so that it sees every request the client
// makes, an informer's included, and nothing of any other client's.
type requestCounter struct {
	n              [numVerbs]atomic.Int64
	sent, received atomic.Int64
}

// requestCounts are a snapshot of a requestCounter, or the difference of
// two.
type requestCounts struct {
	n              [numVerbs]int64
	sent, received int64
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		v := verbOf(req)
		c.n[v].Add(1)
		if req.Body != nil && req.Body != http.NoBody {
			req = req.Clone(req.Context()) // a RoundTripper must not change its caller's request
			req.Body = &countingBody{ReadCloser: req.Body, n: &c.sent}
		}
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.received}
		}
		return resp, err
	})
}

func (c *requestCounter) snapshot() requestCounts {
	var s requestCounts
	for v := range numVerbs {
		s.n[v] = c.n[v].Load()
	}
	s.sent, s.received = c.sent.Load(), c.received.Load()
	return s
}

// since is what was counted from before to c.
func (c requestCounts) since(before requestCounts) requestCounts {
	for v := range numVerbs {
		c.n[v] -= before.n[v]
	}
	c.sent -= before.sent
	c.received -= before.received
	return c
}

// writes are the requests that change objects.
func (c requestCounts) writes() int64 {
	return c.n[verbPost] + c.n[verbPut] + c.n[verbPatch] + c.n[verbDelete]
}

// byVerb lists the verbs that were used, as "POST 8, GET 1".
func (c requestCounts) byVerb() string {
	var out []string
	for v := range numVerbs {
		if c.n[v] > 0 {
			out = append(out, verbNames[v]+" "+strconv.FormatInt(c.n[v], 10))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func verbOf(req *http.Request) verb {
	switch req.Method {
	case http.MethodPost:
		return verbPost
	case http.MethodPut:
		return verbPut
	case http.MethodPatch:
		return verbPatch
	case http.MethodDelete:
		return verbDelete
	}
	q := req.URL.Query()
	switch {
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		return verbWatch
	case strings.HasSuffix(req.URL.Path, "/resourceslices"):
		return verbList
	}
	return verbGet
}

// countingBody counts the bytes read through it.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// Probe timeout bounds: the default keeps INFO fast; the maximum keeps a
// misconfigured probe from stalling callers for long.
const (
	defaultTimeout = 200 * time.Millisecond
	maxTimeoutMs   = 10000
)

// defaultPort is the well-known port of a scheme endpoints commonly use,
// for URLs that name no port; "" for other schemes.
func defaultPort(scheme string) string {
	switch strings.ToLower(scheme) {
	case "rtsp":
		return "554"
	case "rtsps":
		return "322"
	case "http":
		return "80"
	case "https":
		return "443"
	case "opc.tcp":
		return "4840"
	case "mqtt":
		return "1883"
	case "mqtts":
		return "8883"
	}
	return ""
}

// The plugin's own args.
const (
	argEnvPrefix = "envPrefix"
	argProbe     = "probe"
	argEndpoints = "endpoints"
)

// endpoint is one entry of args.endpoints.
type endpoint struct {
	ID         string            `json:"id"`
	URL        string            `json:"url"`
	Env        map[string]string `json:"env"`
	Properties map[string]string `json:"properties"`

	parsed *url.URL
	// addr is host:port for the TCP probe, set only when probing.
	addr string
}

// probeArgs is args.probe.
type probeArgs struct {
	TCP       bool `json:"tcp"`
	TimeoutMs *int `json:"timeoutMs"`
}

// endpointArgs are the plugin's own args, checked.
type endpointArgs struct {
	endpoints []endpoint
	prefix    string
	probe     bool
	timeout   time.Duration
}

// parseArgs reads envPrefix, probe and endpoints; probe and endpoints
// refuse unknown members, so that a misspelt key is an error rather than
// ignored.
func parseArgs(cfg *spec.Config) (endpointArgs, error) {
	a := endpointArgs{prefix: strings.ToUpper(cfg.Type), timeout: defaultTimeout}
	var p probeArgs
	err := engine.ReadArgs(cfg,
		engine.String(argEnvPrefix, &a.prefix, checkEnvPrefix),
		engine.Object(argProbe, &p, checkProbe),
		engine.Objects(argEndpoints, &a.endpoints, func(eps []endpoint) error { return checkEndpoints(eps, a.prefix, p.TCP) }),
	)
	if err != nil {
		return a, err
	}
	a.probe = p.TCP
	if p.TimeoutMs != nil {
		a.timeout = time.Duration(*p.TimeoutMs) * time.Millisecond
	}
	return a, nil
}

func checkEnvPrefix(prefix string) error {
	if !isEnvName(prefix) {
		return fmt.Errorf("%q is not a variable name such as CAMERA", prefix)
	}
	return nil
}

func checkProbe(p probeArgs) error {
	if p.TimeoutMs == nil {
		return nil
	}
	if err := engine.Between(1, maxTimeoutMs)(*p.TimeoutMs); err != nil {
		return jsonread.At("timeoutMs", err)
	}
	return nil
}

// checkEndpoints checks every endpoint and, when probing, works out its
// address; an id used twice is refused.
func checkEndpoints(eps []endpoint, prefix string, probe bool) error {
	seen := map[string]bool{}
	for i := range eps {
		e := &eps[i]
		if err := e.check(prefix, probe); err != nil {
			return jsonread.AtIndex(i, err)
		}
		if seen[e.ID] {
			return jsonread.AtIndex(i, jsonread.At("id", fmt.Errorf("%q is used twice", e.ID)))
		}
		seen[e.ID] = true
	}
	return nil
}

// check validates an endpoint and, when probing, works out its address.
func (e *endpoint) check(prefix string, probe bool) error {
	// CDI's rules too: the id becomes the device name of a CDI spec.
	if err := engine.CheckDeviceID(e.ID); err != nil {
		return jsonread.At("id", err)
	}
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme == "" || u.Hostname() == "" {
		return jsonread.At("url", fmt.Errorf("%q must be absolute with a host, e.g. rtsp://10.0.0.5/stream", e.URL))
	}
	e.parsed = u
	for k := range e.Env {
		if !isEnvName(k) {
			return jsonread.At("env", fmt.Errorf("%q is not a variable name", k))
		}
		if k == prefix+"_URL" || k == prefix+"_ID" {
			return jsonread.At("env", fmt.Errorf("%s is set by the plugin", k))
		}
	}
	if !probe {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return jsonread.At("url", fmt.Errorf("%q cannot be probed: it names no usable port and scheme %q has no default one", e.URL, u.Scheme))
	}
	e.addr = net.JoinHostPort(u.Hostname(), port)
	return nil
}

// isEnvName accepts a portable environment variable name.
func isEnvName(s string) bool {
	for i, c := range s {
		alpha := c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
		if !alpha && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

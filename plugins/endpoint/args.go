package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/plainjson"
	"github.com/tidwall/gjson"
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

// endpoint is one entry of args.endpoints.
type endpoint struct {
	ID         string
	URL        string
	Env        map[string]string
	Properties map[string]string

	parsed *url.URL
	// addr is host:port for the TCP probe, set only when probing.
	addr string
}

// probeArgs is args.probe.
type probeArgs struct {
	TCP       bool
	TimeoutMs *int
}

// AppendMembers describes p as args.probe holds it.
func (p *probeArgs) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms, plainjson.Bool("tcp", &p.TCP), plainjson.IntPtr("timeoutMs", &p.TimeoutMs))
}

// AppendMembers describes e as args.endpoints holds it.
func (e *endpoint) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("id", &e.ID),
		plainjson.String("url", &e.URL),
		plainjson.StringMap("env", &e.Env),
		plainjson.StringMap("properties", &e.Properties),
	)
}

// endpointArgs are the plugin's own args, checked.
type endpointArgs struct {
	endpoints []endpoint
	prefix    string
	probe     bool
	timeout   time.Duration
}

func parseArgs(cfg *spec.Config) (endpointArgs, error) {
	a := endpointArgs{prefix: strings.ToUpper(cfg.Type), timeout: defaultTimeout}
	if v := cfg.Arg("envPrefix"); v.Exists() {
		if v.Type != gjson.String || !isEnvName(v.String()) {
			return a, spec.NewError(spec.CodeInvalidConfig, "args.envPrefix must be a variable name such as CAMERA, not %s", v.Raw)
		}
		a.prefix = v.String()
	}
	p, err := readProbe(cfg.Arg("probe"))
	if err != nil {
		return a, err
	}
	if p.TimeoutMs != nil {
		if *p.TimeoutMs < 1 || *p.TimeoutMs > maxTimeoutMs {
			return a, spec.NewError(spec.CodeInvalidConfig, "args.probe.timeoutMs must be from 1 to %d, not %d", maxTimeoutMs, *p.TimeoutMs)
		}
		a.timeout = time.Duration(*p.TimeoutMs) * time.Millisecond
	}
	a.probe = p.TCP
	if a.endpoints, err = readEndpoints(cfg); err != nil {
		return a, err
	}
	seen := map[string]bool{}
	for i := range a.endpoints {
		e := &a.endpoints[i]
		if err := a.check(e); err != nil {
			return a, spec.NewError(spec.CodeInvalidConfig, "args.endpoints[%d]: %w", i, err)
		}
		if seen[e.ID] {
			return a, spec.NewError(spec.CodeInvalidConfig, "args.endpoints[%d]: id %q is used twice", i, e.ID)
		}
		seen[e.ID] = true
	}
	return a, nil
}

// readProbe reads the optional args.probe, refusing unknown members so
// that a misspelt key is an error rather than ignored. Absent and null
// read as no probe.
func readProbe(v gjson.Result) (probeArgs, error) {
	var p probeArgs
	err := plainjson.ReadStrict(v, &p)
	if err != nil {
		return p, spec.NewError(spec.CodeInvalidConfig, "args.probe: %w", err)
	}
	return p, nil
}

// readEndpoints reads the optional args.endpoints, refusing unknown
// members as readProbe does. Absent and null read as no endpoints.
func readEndpoints(cfg *spec.Config) ([]endpoint, error) {
	v := cfg.Arg("endpoints")
	if !v.Exists() || v.Type == gjson.Null {
		return nil, nil
	}
	if !v.IsArray() {
		return nil, spec.NewError(spec.CodeInvalidConfig, "args.endpoints must be a list of {id, url, env, properties}, not %s", v.Raw)
	}
	var eps []endpoint
	err := plainjson.Read(gjson.ParseBytes(cfg.Args), plainjson.Table{plainjson.Objects("endpoints", &eps).Strict()})
	if err != nil {
		// The error names the member, element and field:
		// "args.endpoints[1].env: ...".
		return nil, spec.NewError(spec.CodeInvalidConfig, "args.%w", err)
	}
	return eps, nil
}

// check validates an endpoint and, when probing, works out its address.
func (a endpointArgs) check(e *endpoint) error {
	if err := spec.CheckDeviceID(e.ID); err != nil {
		return err
	}
	u, err := url.Parse(e.URL)
	if err != nil || u.Scheme == "" || u.Hostname() == "" {
		return fmt.Errorf("url %q must be absolute with a host, e.g. rtsp://10.0.0.5/stream", e.URL)
	}
	e.parsed = u
	for k := range e.Env {
		if !isEnvName(k) {
			return fmt.Errorf("env: %q is not a variable name", k)
		}
		if k == a.prefix+"_URL" || k == a.prefix+"_ID" {
			return fmt.Errorf("env: %s is set by the plugin", k)
		}
	}
	if !a.probe {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("url %q cannot be probed: it names no usable port and scheme %q has no default one", e.URL, u.Scheme)
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

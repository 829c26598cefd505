package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/spec"
)

// maxParallelProbes bounds concurrent probes so that a long endpoint list
// does not exhaust file descriptors; the rest wait for a free slot.
const maxParallelProbes = 64

// dialFunc opens a connection; net.Dialer.DialContext in production.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

func family() engine.Family {
	var d net.Dialer
	return familyWith(d.DialContext)
}

// familyWith builds the family with the given dialer, so tests can observe
// how probes are made.
func familyWith(dial dialFunc) engine.Family {
	return engine.Family{Name: "endpoint", Args: []string{argEnvPrefix, argProbe, argEndpoints}, Discover: func(h *engine.Host) (*engine.Inventory, error) {
		return discover(h, dial)
	}}
}

// discover lists the configured endpoints, in configuration order, and
// probes them if asked to.
func discover(h *engine.Host, dial dialFunc) (*engine.Inventory, error) {
	a, err := parseArgs(h.Config)
	if err != nil {
		return nil, err
	}
	rs := spec.ResourceSpec{Type: h.Config.Type}
	inv := &engine.Inventory{Resources: []spec.ResourceSpec{rs}, Devices: make([]engine.Device, 0, len(a.endpoints))}
	var probeErrs []error
	if a.probe {
		probeErrs = probeAll(dial, a.endpoints, a.timeout)
	}
	for i, e := range a.endpoints {
		healthy := true
		if a.probe && probeErrs[i] != nil {
			healthy = false
			fmt.Fprintf(h.Stderr, "endpoint: %s is unhealthy: %v\n", e.ID, probeErrs[i])
		}
		inv.Devices = append(inv.Devices, a.device(e, rs, healthy))
	}
	return inv, nil
}

// device describes an endpoint. It has no nodes: a container reaches it
// through the variables. The url property hides any password in the URL,
// since the inventory is shown to operators.
func (a endpointArgs) device(e endpoint, rs spec.ResourceSpec, healthy bool) engine.Device {
	env := map[string]string{a.prefix + "_URL": e.URL, a.prefix + "_ID": e.ID}
	for k, v := range e.Env {
		env[k] = v
	}
	props := map[string]string{}
	for k, v := range e.Properties {
		props[k] = v
	}
	if _, ok := props["url"]; !ok {
		props["url"] = e.parsed.Redacted()
	}
	return engine.Device{ID: e.ID, Resource: rs, Shared: true, Healthy: healthy, Env: env, Properties: props}
}

// probeAll dials every endpoint's address concurrently, at most
// maxParallelProbes at a time, and returns each one's error (nil: it
// accepted a TCP connection within timeout).
func probeAll(dial dialFunc, eps []endpoint, timeout time.Duration) []error {
	errs := make([]error, len(eps))
	sem := make(chan struct{}, maxParallelProbes)
	var wg sync.WaitGroup
	for i := range eps {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = probe(dial, eps[i].addr, timeout)
		})
	}
	wg.Wait()
	return errs
}

func probe(dial dialFunc, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("tcp probe of %s: %w", addr, err)
	}
	conn.Close() // connecting was the whole test
	return nil
}

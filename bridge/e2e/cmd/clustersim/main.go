// Command clustersim simulates a cluster's bridges sharing Instances
// through one real kube-apiserver and etcd (as
// bridge/internal/testing/apitest runs them for the tests): 50 simulated
// nodes, each a kube store with a client and node name of its own as a
// node's bridge has, share 200 Instances of capacity 4.
//
// Every node observes every Instance at once (time until every store
// lists every Instance as seen by its node, API writes); 500 claims, 8 in
// flight, each by a random node on a free slot of a random Instance (API requests of
// every client by verb, writes and conflict retries per allocation, watch
// events and bytes, the time from a claim's return until every other
// store shows it); the API server's, etcd's and each store's memory, and
// one Instance's size; one node's departure cleared as the departed-node
// janitor does (kube.Store.ForgetNode); then every claim released and
// none left; then a node serving a local pool of 8 devices beside
// -sim-others Instances of other pools (its store's heap, and the events
// it hears while those are all written again); last, one node's first
// discovery of -sim-startup new devices through a store with the bridge's
// client rate limits (kube.ClientQPS and ClientBurst), time and requests,
// against the same objects written with an unlimited client. -sim-nodes,
// -sim-instances, -sim-claims, -sim-capacity, -sim-inflight, -sim-others
// and -sim-startup size it.
//
// `make bench` runs it; alone, from bridge/e2e:
//
//	go run ./cmd/clustersim -sim-nodes 5 -sim-instances 20
//
// with KUBE_APISERVER naming a built kube-apiserver (else apitest builds
// one, cached). Progress goes to stderr, the table to stdout. Without etcd
// (Debian's etcd-server) it says it skipped, unless the CI environment
// variable is set, when it fails. bridge/SCALING.md reads its figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

func main() {
	var o clusterOptions
	flag.IntVar(&o.nodes, "sim-nodes", 50, "simulated nodes, 0 for none")
	// 50 x 200 keeps the simulation within a minute on two busy cores;
	// 200 x 200 took one.
	flag.IntVar(&o.instances, "sim-instances", 200, "shared Instances every simulated node sees")
	flag.IntVar(&o.claims, "sim-claims", 500, "claims (at most 3/4 of the slots)")
	flag.IntVar(&o.capacity, "sim-capacity", 4, "slots per shared Instance")
	flag.IntVar(&o.inFlight, "sim-inflight", 8, "claims under way at once")
	flag.IntVar(&o.others, "sim-others", 10000, "Instances of other pools beside a node that serves a local pool of 8, 0 for none")
	flag.IntVar(&o.startup, "sim-startup", 5000, "new devices of one node's first discovery, 0 for none")
	flag.Parse()
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "clustersim:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "clustersim:", err)
		os.Exit(1)
	}
}

// run starts the API server and runs the simulation against it.
func run(ctx context.Context, o clusterOptions, out, log io.Writer) error {
	start := time.Now()
	progress := func(format string, args ...any) { fmt.Fprintf(log, "clustersim: "+format+"\n", args...) }
	progress("starting etcd and kube-apiserver (the apiserver is built once and cached; a cold build takes minutes)")
	env, err := apitest.RunWithInstances(ctx, apitest.Options{})
	switch {
	case errors.Is(err, apitest.ErrUnavailable) && !apitest.MustRun():
		fmt.Fprintf(out, "\ncluster simulation: SKIPPED, %v\n", err)
		return nil
	case err != nil:
		return err
	}
	defer func() {
		if err := env.StopAndRemove(); err != nil {
			progress("%v", err)
		}
	}()
	progress("API server ready in %v", env.Ready.Round(time.Millisecond))
	if err := simulate(ctx, o, env, out, progress); err != nil {
		return err
	}
	progress("done in %v", time.Since(start).Round(time.Second))
	return nil
}

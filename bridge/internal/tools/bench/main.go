package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

func main() {
	o := options{raceNodes: []int{3, 4}, scaleDevices: []int{1000, 5000}}
	flag.IntVar(&o.rounds, "n", 200, "timed Allocate rounds per subject, after a warm-up")
	flag.Func("devices", "endpoints of each big bridge in the start-up measurement, comma-separated (default 1000,5000)",
		func(v string) (err error) { o.scaleDevices, err = positiveInts(v); return err })
	flag.IntVar(&o.scaleCapacity, "capacity", 4, "slots per endpoint in the start-up measurement")
	flag.IntVar(&o.scaleRuns, "starts", 3, "starts of each bridge size")
	flag.IntVar(&o.raceRounds, "race", 50, "rounds of each race for the last slot")
	flag.BoolVar(&o.kube, "kube", true, "measure the kube store too (starts etcd and a kube-apiserver)")
	flag.IntVar(&o.sim.nodes, "sim-nodes", 50, "simulated nodes in the cluster simulation, 0 for none (needs -kube)")
	// 50 x 200 keeps the simulation within about three minutes on two
	// busy cores: setting up costs nodes x nodes x Instances watch events.
	flag.IntVar(&o.sim.instances, "sim-instances", 200, "shared Instances every simulated node sees")
	flag.IntVar(&o.sim.claims, "sim-claims", 500, "claims in the cluster simulation (at most 3/4 of the slots)")
	flag.IntVar(&o.sim.capacity, "sim-capacity", 4, "slots per shared Instance in the cluster simulation")
	flag.IntVar(&o.sim.inFlight, "sim-inflight", 8, "claims under way at once in the cluster simulation")
	flag.StringVar(&o.only, "only", "", `run one part alone: "cluster" for the cluster simulation, "hotplug" for devices coming and going`)
	// 30 s, not the minute the figure is given per: the bench is long
	// enough, and each window holds the same work (the drop-in poll every
	// second; no period discovery, whose minute has not come).
	flag.DurationVar(&o.idle, "idle", 30*time.Second, "window of each idle CPU measurement, without and with the device watch")
	flag.Parse()
	if o.rounds < 1 || o.scaleCapacity < 1 || o.scaleRuns < 1 || o.raceRounds < 1 {
		fmt.Fprintln(os.Stderr, "bridge bench: -n, -capacity, -starts and -race must be at least 1")
		os.Exit(2)
	}
	if err := o.sim.check(); err != nil {
		fmt.Fprintln(os.Stderr, "bridge bench:", err)
		os.Exit(2)
	}
	if o.only != "" && o.only != onlyCluster && o.only != onlyHotplug {
		fmt.Fprintf(os.Stderr, "bridge bench: -only %q: the parts that run alone are %q and %q\n", o.only, onlyCluster, onlyHotplug)
		os.Exit(2)
	}
	if o.idle < time.Second {
		fmt.Fprintln(os.Stderr, "bridge bench: -idle must be at least a second")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bridge bench:", err)
		os.Exit(1)
	}
}

// positiveInts parses a comma-separated list of numbers of at least 1.
func positiveInts(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a number of at least 1", f)
		}
		out = append(out, n)
	}
	return out, nil
}

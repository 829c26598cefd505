package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	flag.Parse()
	if o.rounds < 1 || o.scaleCapacity < 1 || o.scaleRuns < 1 || o.raceRounds < 1 {
		fmt.Fprintln(os.Stderr, "bridge bench: -n, -capacity, -starts and -race must be at least 1")
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

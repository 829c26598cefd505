package bench

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The sizes of BenchmarkBridge's run, as flags of the test binary
// (go test passes on the flags it does not know itself).
var (
	flagRounds   = flag.Int("rounds", 200, "timed Allocate rounds per subject, after a warm-up")
	flagDevices  = flag.String("devices", "1000,5000", "endpoints of each big bridge in the start-up measurement, comma-separated")
	flagCapacity = flag.Int("capacity", 4, "slots per endpoint in the start-up measurement")
	flagStarts   = flag.Int("starts", 3, "starts of each bridge size")
	flagRaces    = flag.Int("race-rounds", 50, "rounds of each race for the last slot")
	flagKube     = flag.Bool("kube", true, "measure the kube store too (starts etcd and a kube-apiserver)")
	flagOnly     = flag.String("only", "", `run one part alone: "hotplug" for devices coming and going`)
	// 30 s, not the minute the figure is given per: the bench is long
	// enough, and each window holds the same work (the drop-in poll every
	// second; no period discovery, whose minute has not come).
	flagIdle = flag.Duration("idle", 30*time.Second, "window of each idle CPU measurement, without and with the device watch")
	// BenchmarkDRAPublish's and BenchmarkDRAStart's.
	flagDRADevices = flag.Int("dra-devices", 1000, "devices of the pool BenchmarkDRAPublish publishes, and the terminals of BenchmarkDRAStart's bridge")
	flagDRARounds  = flag.Int("dra-rounds", 5, "rounds of BenchmarkDRAPublish, each a publish and two republishes of both subjects; starts of BenchmarkDRAStart's bridge, each with the floor")
)

// flagOptions are the run's options from the flags.
func flagOptions() (options, error) {
	o := options{rounds: *flagRounds, scaleCapacity: *flagCapacity, scaleRuns: *flagStarts,
		raceRounds: *flagRaces, raceNodes: []int{3, 4}, kube: *flagKube, only: *flagOnly, idle: *flagIdle}
	if o.rounds < 1 || o.scaleCapacity < 1 || o.scaleRuns < 1 || o.raceRounds < 1 {
		return o, fmt.Errorf("-rounds, -capacity, -starts and -race-rounds must be at least 1")
	}
	if o.only != "" && o.only != onlyHotplug {
		return o, fmt.Errorf("-only %q: the part that runs alone is %q", o.only, onlyHotplug)
	}
	if o.idle < time.Second {
		return o, fmt.Errorf("-idle must be at least a second")
	}
	var err error
	if o.scaleDevices, err = positiveInts(*flagDevices); err != nil {
		return o, fmt.Errorf("-devices: %w", err)
	}
	return o, nil
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

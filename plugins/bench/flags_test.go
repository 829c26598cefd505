package bench

import (
	"flag"
	"fmt"
	"time"
)

// The sizes of BenchmarkPlugins' run, as flags of the test binary (go
// test passes on the flags it does not know itself). -rounds was -n,
// which go test would take as its own.
var (
	flagRounds     = flag.Int("rounds", 200, "timed round trips per subject, after a warm-up")
	flagConcurrent = flag.Duration("concurrent", 3*time.Second, "how long the 64 processes contend on one state file")
	flagHostLocal  = flag.String("host-local", "", "version of github.com/containernetworking/plugins for host-local (default: newest on the module proxy)")
)

// flagOptions are the run's options from the flags.
func flagOptions() (options, error) {
	o := options{rounds: *flagRounds, concurrent: *flagConcurrent, hostLocal: *flagHostLocal}
	if o.rounds < 1 {
		return o, fmt.Errorf("-rounds must be at least 1")
	}
	return o, nil
}

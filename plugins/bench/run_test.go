package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdiexec/cdi/internal/gobuild"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// options size a run (flags_test.go).
type options struct {
	rounds     int // timed round trips per subject
	concurrent time.Duration
	hostLocal  string // the version of host-local; "" for the newest
	// noHostLocal leaves host-local out, as when it does not install:
	// TestHarness's, which should need no module proxy.
	noHostLocal bool
}

// run builds the plugins and the floors and prints each table to out as
// soon as it is measured. A correctness failure of the contention is
// returned after its figures are printed.
func run(ctx context.Context, o options, out io.Writer) error {
	root, err := exectest.ModuleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "cdi-bench")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	progress("building the plugins and the floors (%s go build %s)", strings.Join(gobuild.Env(), " "), strings.Join(gobuild.Flags(), " "))
	if err := build(ctx, root, tmp); err != nil {
		return err
	}
	subjects, err := roundTripSubjects(ctx, root, tmp, o)
	if err != nil {
		return err
	}
	rows, err := measure(ctx, subjects, o.rounds)
	if err != nil {
		return err
	}
	printTable(out, rows, o.rounds)
	if err := runBreakdown(ctx, out, root, tmp, o.rounds, median(rows, kindHostLocal)); err != nil {
		return err
	}
	return runContention(ctx, out, root, tmp, o.concurrent)
}

// runBreakdown prints where each plugin's ADD+DEL goes, so that a missed
// target comes with its cause; hostLocal, the table's, sets the budget.
// Its state files are its own.
func runBreakdown(ctx context.Context, out io.Writer, root, tmp string, n int, hostLocal time.Duration) error {
	var plugins []phaseSubject
	for _, p := range pluginCases() {
		conf, err := dropIn(root, p.conf, filepath.Join(tmp, "phase-"+p.name), nil)
		if err != nil {
			return err
		}
		plugins = append(plugins, phaseSubject{name: p.name, bin: filepath.Join(tmp, p.name), request: p.request, conf: conf})
	}
	fl, rows, err := breakdown(ctx, filepath.Join(tmp, "floor"), filepath.Join(tmp, "pagefloor"), plugins, n)
	if err != nil {
		return err
	}
	printBreakdown(out, fl, hostLocal, rows, n)
	return nil
}

// median is the median round trip of the subject of kind k in rows, 0
// when there is none (host-local that did not install).
func median(rows []row, k kind) time.Duration {
	for _, r := range rows {
		if r.kind == k {
			return r.p50
		}
	}
	return 0
}

// roundTripSubjects lists what the table compares: the floor, host-local
// when it installs and works, and each plugin with its default drop-in.
func roundTripSubjects(ctx context.Context, root, tmp string, o options) ([]subject, error) {
	floor := subject{name: "floor (trivial Go binary)", kind: kindFloor, bin: filepath.Join(tmp, "floor")}
	floor.trip = floorTrip(floor.bin)
	stateFloor := subject{name: "state floor (floor + SPEC state rule)", kind: kindStateFloor, bin: filepath.Join(tmp, "statefloor")}
	conf, err := os.ReadFile(filepath.Join(root, "conf.d/tty.d/generic.conf"))
	if err != nil {
		return nil, err
	}
	stateFloor.trip = stateFloorTrip(stateFloor.bin, filepath.Join(tmp, "statefloor.state"), conf)
	subjects := []subject{floor, stateFloor}
	if o.noHostLocal {
		progress("host-local left out, its column stays empty")
	} else if hl, err := hostLocalSubject(ctx, tmp, o.hostLocal); err != nil {
		// host-local is a comparison, not the subject: without it the
		// table still has the floor, so carry on and say why.
		progress("host-local SKIPPED, its column stays empty: %v", err)
	} else {
		subjects = append(subjects, hl)
	}
	for _, p := range pluginCases() {
		conf, err := dropIn(root, p.conf, filepath.Join(tmp, "state-"+p.name), nil)
		if err != nil {
			return nil, err
		}
		bin := filepath.Join(tmp, p.name)
		subjects = append(subjects, subject{name: p.name, kind: kindPlugin, bin: bin, trip: pluginTrip(bin, conf, p.request)})
	}
	return subjects, nil
}

// hostLocalSubject installs host-local and checks that one ADD+DEL works,
// so that a broken install is reported as such rather than timed.
func hostLocalSubject(ctx context.Context, tmp, version string) (subject, error) {
	if version == "" {
		v, err := latestVersion(ctx, cniPluginsModule)
		if err != nil {
			return subject{}, err
		}
		version = v
	}
	progress("installing CNI host-local %s from the module proxy", version)
	bin, err := installHostLocal(ctx, filepath.Join(tmp, "cni"), version)
	if err != nil {
		return subject{}, err
	}
	trip := hostLocalTrip(bin, filepath.Join(tmp, "host-local-data"))
	if err := trip(ctx, -100); err != nil {
		return subject{}, fmt.Errorf("host-local %s does not work here: %w", version, err)
	}
	return subject{name: "CNI host-local " + version, kind: kindHostLocal, bin: bin, trip: trip}, nil
}

// runContention runs the 64 processes and fails on a correctness problem
// only after the figures are printed.
func runContention(ctx context.Context, out io.Writer, root, tmp string, d time.Duration) error {
	conf, err := dropIn(root, "conf.d/tty.d/generic.conf", filepath.Join(tmp, "contend"), map[string]any{"num_system_reserved": 12})
	if err != nil {
		return err
	}
	bin := filepath.Join(tmp, "generic-tty")
	progress("%d processes doing ADD/DEL on one state file for %v", workers, d)
	c, err := contend(ctx, bin, conf, d)
	if err != nil {
		return err
	}
	printContention(out, c, d)
	if c.doubles > 0 || c.leftOver != 0 {
		return fmt.Errorf("correctness failure: %d double handouts, %d allocations left after every DEL", c.doubles, c.leftOver)
	}
	return nil
}

// progress says on stderr what the run is doing. Its prefix has a space:
// go test passes stderr on with the benchmark lines, and benchstat would
// take a line that starts "word: " for a configuration key, splitting its
// table there.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "plugins bench: "+format+"\n", args...)
}

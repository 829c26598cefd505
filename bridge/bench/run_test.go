package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// options are the command-line flags.
type options struct {
	rounds        int   // timed Allocate rounds per subject
	scaleDevices  []int // the big bridges' sizes
	scaleCapacity int
	scaleRuns     int // starts of each bridge size
	raceRounds    int
	raceNodes     []int
	kube          bool // the parts that need a real API server
	// only names the one part to run: "" for every part, onlyHotplug for
	// the hotplug part alone.
	only string
	// idle is the window the idle CPU is measured over.
	idle time.Duration
}

const onlyHotplug = "hotplug"

// bench is one run: where it writes and what it built.
type bench struct {
	o              options
	out, log       io.Writer // the tables; progress
	root, tmp, bin string
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "bridge bench: "+format+"\n", args...)
}

// run builds the binaries and runs every part, printing each table as
// soon as it is measured. The binary's start-up goes first, while no API
// server runs beside it.
func run(ctx context.Context, o options, out, log io.Writer) error {
	b := &bench{o: o, out: out, log: log}
	start := time.Now()
	var err error
	if b.root, err = exectest.ModuleRoot(); err != nil {
		return err
	}
	if b.tmp, err = os.MkdirTemp("", "cdi-bridge-bench"); err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(b.tmp)
	b.bin = filepath.Join(b.tmp, "bin")
	b.progress("building generic-tty, endpoint and cdi-bridge")
	if err := build(ctx, b.root, b.bin); err != nil {
		return err
	}
	if o.only == onlyHotplug {
		if err := b.hotplug(ctx); err != nil {
			return err
		}
		b.progress("done in %v", time.Since(start).Round(time.Second))
		return nil
	}
	if err := b.scale(ctx); err != nil {
		return err
	}
	if err := b.hotplug(ctx); err != nil {
		return err
	}
	env, err := b.api(ctx)
	if err != nil {
		return err
	}
	if env != nil {
		defer func() {
			if err := env.StopAndRemove(); err != nil {
				b.progress("%v", err)
			}
		}()
	}
	if err := b.allocations(ctx, env); err != nil {
		return err
	}
	if env != nil {
		if err := b.races(ctx, env); err != nil {
			return err
		}
	}
	b.progress("done in %v", time.Since(start).Round(time.Second))
	return nil
}

// scale starts the one-device bridge (the floor) and the big ones in
// turn, scaleRuns times each.
func (b *bench) scale(ctx context.Context) error {
	rows := []*scaleRow{{devices: 1, capacity: b.o.scaleCapacity, perDevice: true}}
	for _, n := range b.o.scaleDevices {
		rows = append(rows, &scaleRow{devices: n, capacity: b.o.scaleCapacity, perDevice: true})
		if n > node.DefaultMaxInstanceLevel {
			rows = append(rows, &scaleRow{devices: n, capacity: b.o.scaleCapacity})
		}
	}
	for i := range b.o.scaleRuns {
		for _, row := range rows {
			b.progress("starting cdi-bridge with %s (run %d of %d)", row.name(), i+1, b.o.scaleRuns)
			dir := filepath.Join(b.tmp, fmt.Sprintf("scale-%d-%d-%d", row.devices, row.plugins(), i))
			r, err := startBridge(ctx, b.bin, dir, row)
			if err != nil {
				return fmt.Errorf("%s: %w", row.name(), err)
			}
			row.runs = append(row.runs, r)
		}
	}
	printScale(b.out, rows)
	return nil
}

// api starts the API server, or returns nil when the kube parts are off
// or cannot run here (and CI is not set), saying so in the output.
func (b *bench) api(ctx context.Context) (*apitest.Env, error) {
	if !b.o.kube {
		fmt.Fprintln(b.out, "\nkube store: not measured (-kube=false)")
		return nil, nil
	}
	b.progress("starting etcd and kube-apiserver (the apiserver is built once and cached; a cold build takes minutes)")
	env, err := apitest.RunWithInstances(ctx, apitest.Options{})
	switch {
	case errors.Is(err, apitest.ErrUnavailable) && !apitest.MustRun():
		fmt.Fprintf(b.out, "\nkube store: SKIPPED, %v\n", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	b.progress("API server ready in %v", env.Ready.Round(time.Millisecond))
	return env, nil
}

// races runs the race for the last slot with each number of nodes.
func (b *bench) races(ctx context.Context, env *apitest.Env) error {
	var races []raceResult
	for _, n := range b.o.raceNodes {
		b.progress("%d kube stores racing for one slot, %d rounds", n, b.o.raceRounds)
		r, err := race(ctx, env, n, b.o.raceRounds)
		if err != nil {
			return fmt.Errorf("race of %d nodes: %w", n, err)
		}
		races = append(races, r)
	}
	printRaces(b.out, races)
	return nil
}

// localStore is the rig's file store. Its poll for other processes'
// writes is off: the rig is the file's only writer, and the poll would
// announce each of its own writes a second time, up to 250 ms later, as
// lists on every stream that no Allocate caused.
func localStore(path string) *local.Store {
	s := local.New(path)
	s.PollInterval = time.Hour
	return s
}

// allocations times the Allocate subjects of the local rig and, with an
// API server, the kube rig, interleaved with the ADD alone, then checks
// that the undos left nothing allocated.
func (b *bench) allocations(ctx context.Context, env *apitest.Env) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the kube store's informer
	rigs, err := b.rigs(ctx, env)
	defer func() {
		for _, r := range rigs {
			r.stop()
		}
	}()
	if err != nil {
		return err
	}
	alone := func(ctx context.Context) (sample, error) {
		d, err := rigs[0].addAlone(ctx)
		return sample{took: d}, err
	}
	subjects := []subject{{name: "generic-tty ADD exec alone (floor)", run: alone}}
	for _, r := range rigs {
		for _, level := range []string{levelInstance, levelConfiguration} {
			subjects = append(subjects, subject{name: r.name + " store, " + levelName(level), store: r.name,
				level: level, run: func(ctx context.Context) (sample, error) { return r.allocate(ctx, level) }})
		}
		subjects = append(subjects, subject{name: r.name + " store, " + levelName(levelClaim), store: r.name,
			level: levelClaim, run: r.claimAlone})
	}
	b.progress("timing %d Allocate rounds of %d subjects, interleaved", b.o.rounds, len(subjects))
	results, err := b.measure(ctx, subjects, b.o.rounds)
	if err != nil {
		return err
	}
	printAllocate(b.out, results, b.o.rounds)
	printPropagation(b.out, results)
	if env != nil {
		printWrites(b.out, results)
	}
	for _, r := range rigs {
		if err := r.leftovers(ctx); err != nil {
			return err
		}
	}
	return nil
}

// rigs starts the local store's rig and, with an API server, the kube
// store's, each in a directory and namespace of its own.
func (b *bench) rigs(ctx context.Context, env *apitest.Env) ([]*rig, error) {
	dir := filepath.Join(b.tmp, "local")
	r, err := startRig(ctx, rigConfig{name: "local", dir: dir, binDir: b.bin, fixture: fixtureRoot(b.root),
		store: localStore(filepath.Join(dir, "instances.json")), quiet: localQuiet})
	if err != nil || env == nil {
		return nonNil(r), err
	}
	rigs := []*rig{r}
	ns, err := env.NewNamespace(ctx, "bench-")
	if err != nil {
		return rigs, err
	}
	ks, err := newKubeStore(ctx, env.Config, ns, nodeName)
	if err != nil {
		return rigs, err
	}
	r, err = startRig(ctx, rigConfig{name: "kube", dir: filepath.Join(b.tmp, "kube"), binDir: b.bin,
		fixture: fixtureRoot(b.root), store: ks, writes: func() int { return ks.Stats().Writes }, quiet: kubeQuiet})
	return append(rigs, nonNil(r)...), err
}

func nonNil(r *rig) []*rig {
	if r == nil {
		return nil
	}
	return []*rig{r}
}

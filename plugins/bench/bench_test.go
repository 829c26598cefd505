package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// The binaries are built once per test binary, on first use, into a
// directory TestMain removes: plain `go test` that runs no benchmark and
// no round-trip test pays nothing. -count 6 builds them once, not six
// times.
var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cdi-bench-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// built returns the module root and the directory of the built binaries.
func built(tb testing.TB) (root, dir string) {
	tb.Helper()
	root, err := exectest.ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	buildOnce.Do(func() { buildErr = build(context.Background(), root, binDir) })
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return root, binDir
}

// BenchmarkPlugins prints the tables of doc.go, every figure against its
// floors measured in the same run. The run is one operation: it times
// -rounds round trips of each subject itself, interleaved, so run it with
// -benchtime 1x (go test stops after one run this long anyway). A double
// handout or an allocation left after every DEL fails it; a missed target
// does not.
func BenchmarkPlugins(b *testing.B) {
	o, err := flagOptions()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := run(b.Context(), o, os.Stdout); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTrip is one ADD+DEL of each subject of the round-trip
// table, one subject after another: the floor first, so that benchstat
// -col /subject sets every other against it, then the state floor,
// host-local (skipped when the module proxy cannot provide it: it is a
// comparison, not the subject) and each plugin with its default drop-in.
func BenchmarkRoundTrip(b *testing.B) {
	root, dir := built(b)
	b.Run("subject=floor", func(b *testing.B) { benchTrip(b, floorTrip(filepath.Join(dir, "floor"))) })
	b.Run("subject=state-floor", func(b *testing.B) {
		conf, err := os.ReadFile(filepath.Join(root, "conf.d/tty.d/generic.conf"))
		if err != nil {
			b.Fatal(err)
		}
		benchTrip(b, stateFloorTrip(filepath.Join(dir, "statefloor"), filepath.Join(b.TempDir(), "state"), conf))
	})
	b.Run("subject=host-local", func(b *testing.B) {
		bin, err := hostLocal()
		if err != nil {
			b.Skipf("host-local unavailable: %v", err)
		}
		benchTrip(b, hostLocalTrip(bin, b.TempDir()))
	})
	for _, p := range pluginCases() {
		b.Run("subject="+p.name, func(b *testing.B) {
			conf, err := dropIn(root, p.conf, b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			benchTrip(b, pluginTrip(filepath.Join(dir, p.name), conf, p.request))
		})
	}
}

// BenchmarkStartup is one exec of the floor, then one VERSION exec of
// each plugin: its start-up alone, which benchstat sets against the
// floor's.
func BenchmarkStartup(b *testing.B) {
	_, dir := built(b)
	b.Run("subject=floor", func(b *testing.B) {
		bin := filepath.Join(dir, "floor")
		benchTrip(b, func(ctx context.Context, _ int) error { _, err := call(ctx, bin, nil, nil); return err })
	})
	for _, p := range pluginCases() {
		b.Run("subject="+p.name, func(b *testing.B) {
			bin := filepath.Join(dir, p.name)
			benchTrip(b, func(ctx context.Context, _ int) error { return versionCall(ctx, bin) })
		})
	}
}

// hostLocal installs host-local once per test binary, as BenchmarkPlugins
// does (-host-local names the version), and returns the binary.
var hostLocal = sync.OnceValues(func() (string, error) {
	hl, err := hostLocalSubject(context.Background(), filepath.Join(binDir, "host-local-install"), *flagHostLocal)
	return hl.bin, err
})

func benchTrip(b *testing.B, rt roundTrip) {
	ctx := context.Background()
	for i := range warmUp {
		if err := rt(ctx, -1-i); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; b.Loop(); i++ {
		if err := rt(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHarness runs BenchmarkPlugins' run briefly, small and without
// host-local, so that its tables cannot rot: every table must be printed,
// and the contention must find no double handout and nothing left over.
func TestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and execs the plugins")
	}
	var out bytes.Buffer
	o := options{rounds: 2, concurrent: 200 * time.Millisecond, noHostLocal: true}
	if err := run(t.Context(), o, &out); err != nil {
		t.Fatalf("%v\noutput so far:\n%s", err, out.String())
	}
	want := []string{"ADD+DEL round trip through exec", "CPU x host-local", "state floor (floor + SPEC state rule)", "host-local: not measured",
		"Where ADD+DEL goes", "page cost:", "64 processes at once", "LIST after all DELs: empty", "double handouts: 0"}
	for _, p := range pluginCases() {
		want = append(want, "\n"+p.name+" ")
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the output lacks %q:\n%s", w, out.String())
		}
	}
}

// TestRoundTripsWork runs each plugin's round trip once and a short
// contention, so that `go test` keeps the bench's calls from rotting.
func TestRoundTripsWork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and execs the plugins")
	}
	root, dir := built(t)
	for _, p := range pluginCases() {
		conf, err := dropIn(root, p.conf, t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := pluginTrip(filepath.Join(dir, p.name), conf, p.request)(context.Background(), 0); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		ps := phaseSubject{name: p.name, bin: filepath.Join(dir, p.name), request: p.request, conf: conf}
		ts, err := ps.phases(context.Background(), 0)
		if err != nil {
			t.Errorf("breakdown: %v", err)
		}
		for k, s := range ts {
			// Any Go process maps fresh pages and runs as it starts.
			if err == nil && (s.faults <= 0 || s.wall <= 0 || s.cpu <= 0) {
				t.Errorf("%s breakdown step %d: %+v, want time, page faults and CPU time", p.name, k, s)
			}
		}
	}
	conf, err := dropIn(root, "conf.d/tty.d/generic.conf", t.TempDir(), map[string]any{"num_system_reserved": 12})
	if err != nil {
		t.Fatal(err)
	}
	// The state floor saves after its ADD and again after its DEL.
	state := filepath.Join(t.TempDir(), "state")
	if err := stateFloorTrip(filepath.Join(dir, "statefloor"), state, conf)(context.Background(), 0); err != nil {
		t.Errorf("state floor: %v", err)
	}
	if data, err := os.ReadFile(state); err != nil || bytes.Count(data, []byte("\n")) != 1 {
		t.Errorf("state floor left %q, %v; want the boot id alone", data, err)
	}
	// The page floor prices a page only if its 256 writes each fault.
	fl, _, err := breakdown(context.Background(), filepath.Join(dir, "floor"), filepath.Join(dir, "pagefloor"), nil, 1)
	if err != nil || fl.paged.faults < fl.bare.faults+128 {
		t.Errorf("page floor: %+v, %v; want some 256 faults more than the floor's", fl, err)
	}
	c, err := contend(context.Background(), filepath.Join(dir, "generic-tty"), conf, 300*time.Millisecond)
	if err != nil || c.doubles != 0 || c.leftOver != 0 || c.terminals != 32 || c.ok == 0 {
		t.Errorf("contend: %+v, %v", c, err)
	}
}

// TestPageCost checks the price of a page and where it is refused.
func TestPageCost(t *testing.T) {
	floor := sample{wall: 6 * time.Millisecond, faults: 185}
	tests := []struct {
		name   string
		paged  sample
		want   time.Duration
		priced string
	}{
		{"priced", sample{wall: 10 * time.Millisecond, faults: 435}, 16 * time.Microsecond, "+100: 1.60"},
		{"huge pages: too few faults", sample{wall: 7 * time.Millisecond, faults: 190}, 0, "+100: -"},
		{"no slower", sample{wall: 6 * time.Millisecond, faults: 435}, 0, "+100: -"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := floors{bare: floor, paged: tt.paged}
			if got := f.pageCost(); got != tt.want {
				t.Errorf("pageCost = %v, want %v", got, tt.want)
			}
			if got := pricedFaults(100, f.pageCost()); got != tt.priced {
				t.Errorf("pricedFaults = %q, want %q", got, tt.priced)
			}
			var out bytes.Buffer
			printPageCost(&out, f)
			if measured := strings.Contains(out.String(), "us a fresh page"); measured != (tt.want > 0) {
				t.Errorf("printPageCost says %q", out.String())
			}
		})
	}
}

// TestLedger checks the scheme the ledger's doc describes.
func TestLedger(t *testing.T) {
	l := newLedger()
	l.acquire("a", []string{"tty13/0"})
	l.releasing("a")
	l.acquire("b", []string{"tty13/0"}) // a's DEL is running: legal reuse
	if l.doubles != 0 {
		t.Fatalf("reuse during a DEL counted as a double handout")
	}
	l.released("a", []string{"tty13/0"}) // must not drop b's hold
	l.acquire("c", []string{"tty13/0"})  // b is live: a double handout
	if l.doubles != 1 {
		t.Fatalf("doubles = %d, want 1", l.doubles)
	}
	l.releasing("c")
	l.released("c", []string{"tty13/0"})
	l.acquire("d", []string{"tty13/0"}) // b is still live: another one
	l.acquire("e", []string{"tty14/0"})
	if l.doubles != 2 || len(l.holders) != 2 {
		t.Fatalf("doubles = %d, holders %v", l.doubles, l.holders)
	}
	l.releasing("b")
	l.released("b", []string{"tty13/0"})
	l.releasing("d")
	l.released("d", []string{"tty13/0"})
	if l.doubles != 2 || len(l.holders) != 1 {
		t.Fatalf("doubles = %d, holders %v", l.doubles, l.holders)
	}
}

// TestInstallCopy checks that a binary installed as a copy of itself keeps
// its bytes and stays executable, with nothing left beside it.
func TestInstallCopy(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	script := []byte("#!/bin/sh\necho installed\n")
	if err := os.WriteFile(bin, script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := installCopy(bin); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(bin); err != nil || !bytes.Equal(got, script) {
		t.Errorf("after installCopy: %q, %v; want the same bytes", got, err)
	}
	if out, err := exec.Command(bin).Output(); err != nil || string(out) != "installed\n" {
		t.Errorf("running the copy: %q, %v", out, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the binary alone", len(entries))
	}
	if err := installCopy(filepath.Join(dir, "missing")); err == nil {
		t.Error("installCopy of a missing binary succeeded")
	}
}

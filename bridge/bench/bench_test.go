package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// localRig builds the binaries into a directory of the test's and starts
// the local store's rig, stopped when the test ends.
func localRig(tb testing.TB) *rig {
	tb.Helper()
	ctx := context.Background()
	root, err := exectest.ModuleRoot()
	if err != nil {
		tb.Fatal(err)
	}
	bin, dir := tb.TempDir(), tb.TempDir()
	if err := build(ctx, root, bin); err != nil {
		tb.Fatal(err)
	}
	r, err := startRig(ctx, rigConfig{name: "local", dir: dir, binDir: bin, fixture: fixtureRoot(root),
		store: localStore(filepath.Join(dir, "instances.json")), quiet: localQuiet})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.stop)
	return r
}

// BenchmarkBridge prints the tables of doc.go, every figure against its
// floor measured in the same run. The run is one operation: it times
// -rounds calls of each subject itself, interleaved, so run it with
// -benchtime 1x (go test stops after one run this long anyway).
func BenchmarkBridge(b *testing.B) {
	o, err := flagOptions()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := run(b.Context(), o, os.Stdout, os.Stderr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocate is the kubelet side's Allocate through the in-process
// node with the local store, at each level, beside the plugin's ADD exec
// alone (the floor, first) and the store's claim alone. ns/op is the call
// alone: the undo that every iteration also runs is left out. With
// -count 6, benchstat -col /subject sets each subject against the floor.
func BenchmarkAllocate(b *testing.B) {
	r := localRig(b)
	subjects := []struct {
		name string
		run  func(context.Context) (sample, error)
	}{
		{"add-alone", func(ctx context.Context) (sample, error) {
			d, err := r.addAlone(ctx)
			return sample{took: d}, err
		}},
		{"instance-level", func(ctx context.Context) (sample, error) { return r.allocate(ctx, levelInstance) }},
		{"configuration-level", func(ctx context.Context) (sample, error) { return r.allocate(ctx, levelConfiguration) }},
		{"claim-alone", r.claimAlone},
	}
	for _, s := range subjects {
		b.Run("subject="+s.name, func(b *testing.B) { benchSamples(b, s.run) })
	}
}

// benchSamples runs the warm-up, then the loop, and reports the samples'
// own times (mean as ns/op, median and p99), without the untimed parts
// of each iteration.
func benchSamples(b *testing.B, run func(context.Context) (sample, error)) {
	ctx := context.Background()
	for range warmUp {
		if _, err := run(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var took []time.Duration
	for b.Loop() {
		s, err := run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		took = append(took, s.took)
	}
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	b.ReportMetric(float64(sum)/float64(len(took)), "ns/op")
	b.ReportMetric(float64(percentile(took, 50))/1e6, "p50-ms")
	b.ReportMetric(float64(percentile(took, 99))/1e6, "p99-ms")
}

// TestHarness runs every part of BenchmarkBridge briefly, small, so that
// it cannot rot: the kube store's parts too where etcd is installed (they
// are reported as skipped where it is not, unless CI is set).
func TestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts bridges (and an API server)")
	}
	var out bytes.Buffer
	o := options{rounds: 3, scaleDevices: []int{20}, scaleCapacity: 2, scaleRuns: 1, raceRounds: 3, raceNodes: []int{3}, kube: true}
	if err := run(t.Context(), o, &out, t.Output()); err != nil {
		t.Fatalf("%v\noutput so far:\n%s", err, out.String())
	}
	want := []string{"20 endpoints x capacity 2", "local store, Instance level", "local store, Configuration level",
		"bridge adds", "Propagation", "generic-tty ADD exec alone (floor)"}
	if !strings.Contains(out.String(), "kube store: SKIPPED") {
		want = append(want, "kube store, Instance level", "writes per allocation", "Race for the last slot")
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the output lacks %q:\n%s", w, out.String())
		}
	}
}

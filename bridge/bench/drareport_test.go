package bench

import (
	"fmt"
	"io"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// draFigures are one subject's medians over the rounds of one step.
type draFigures struct {
	took, returned time.Duration
	reqs           requestCounts // each count its own median
	ctrl           resourceslice.Stats
}

func draFiguresOf(samples []draSample) draFigures {
	var took, returned []time.Duration
	var sent, received, creates, updates, deletes []int64
	var n [numVerbs][]int64
	for _, x := range samples {
		took, returned = append(took, x.took), append(returned, x.returned)
		sent, received = append(sent, x.reqs.sent), append(received, x.reqs.received)
		creates, updates = append(creates, x.ctrl.NumCreates), append(updates, x.ctrl.NumUpdates)
		deletes = append(deletes, x.ctrl.NumDeletes)
		for v := range numVerbs {
			n[v] = append(n[v], x.reqs.n[v])
		}
	}
	f := draFigures{took: percentile(took, 50), returned: percentile(returned, 50),
		reqs: requestCounts{sent: percentile(sent, 50), received: percentile(received, 50)},
		ctrl: resourceslice.Stats{NumCreates: percentile(creates, 50), NumUpdates: percentile(updates, 50),
			NumDeletes: percentile(deletes, 50)}}
	for v := range numVerbs {
		f.reqs.n[v] = percentile(n[v], 50)
	}
	return f
}

// figures are the medians of subject i at step.
func (run *draRun) figures(i, step int) draFigures { return draFiguresOf(run.samples[i][step]) }

func kb(n int64) string { return fmt.Sprintf("%.1f", float64(n)/1e3) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// print writes the DRA table: each step of the library's controller
// against the typed client alone.
func (run *draRun) print(w io.Writer) {
	fmt.Fprintf(w, "\nDRA ResourceSlice publishing: %d devices in one pool (a PCI address, a NUMA node, vendor properties; every\n", run.o.devices)
	fmt.Fprintf(w, "fourth of capacity 4), %d slices, through dradevices.Resources; node-owned, against a real kube-apiserver;\n", run.size[0].slices)
	fmt.Fprintf(w, "medians of %d rounds, each subject on a Node of its own, the subjects' steps interleaved; KB = 10^3 bytes;\n", run.o.rounds)
	fmt.Fprintf(w, "the machine's load average (1 min) %s before the first round, %s after the last\n", run.load[0], run.load[1])
	tw := newTable(w)
	fmt.Fprintln(tw, "step\tsubject\tuntil the API showed it ms\tx floor\tthe call ms\twrites\tx floor\tsent KB\tx floor\treceived KB\trequests\tverdict")
	for step, st := range draSteps() {
		floor := run.figures(1, step)
		for i := range run.samples {
			f := run.figures(i, step)
			name, verdict := "", "-"
			if i == 0 {
				name = st.name
				if st.change != nil {
					verdict = judge(f.reqs.writes() == 1, fmt.Sprintf("%d writes", f.reqs.writes()))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", name, draSubjectName(i),
				ms(f.took), ratio(float64(f.took), float64(floor.took)), ms(f.returned),
				f.reqs.writes(), ratio(float64(f.reqs.writes()), float64(floor.reqs.writes())),
				kb(f.reqs.sent), ratio(float64(f.reqs.sent), float64(floor.reqs.sent)), kb(f.reqs.received),
				f.reqs.byVerb(), verdict)
		}
	}
	tw.Flush()
	run.printNotes(w)
}

func (run *draRun) printNotes(w io.Writer) {
	fmt.Fprint(w, "the library controller's own counts (Controller.GetStats), creates/updates/deletes:")
	for step, st := range draSteps() {
		c := run.figures(0, step).ctrl
		fmt.Fprintf(w, " %s %d/%d/%d;", st.name, c.NumCreates, c.NumUpdates, c.NumDeletes)
	}
	fmt.Fprintln(w)
	for i := range run.samples {
		fmt.Fprintf(w, "the pool's generation once the API showed each step, %s, first round:", draSubjectName(i))
		for step := range draSteps() {
			fmt.Fprintf(w, " %d", run.samples[i][step][0].generation)
		}
		fmt.Fprintln(w)
	}
	for i, z := range run.size {
		fmt.Fprintf(w, "stored after the publish, %s: %d slices, %s KB as JSON (largest %s KB), %s KB as protobuf\n",
			draSubjectName(i), z.slices, kb(int64(z.json)), kb(int64(z.maxJSON)), kb(int64(z.proto)))
	}
	fmt.Fprintln(w, "Library: the bridge's dra.NodeSlices: resourceslice.StartController with the bridge's options (a Node owner),")
	fmt.Fprintf(w, "started with the subject, %s ms (median) before the first publish (in the bridge, the start is earlier: BenchmarkDRAStart); its worker held\n", ms(percentile(run.ahead, 50)))
	fmt.Fprintln(w, "back until that publish, which, as each later one, is NodeSlices.Publish (\"the call\"). On a fresh node, as here, the first")
	fmt.Fprintln(w, "slices are created with the typed client before the controller starts (its start returns only once its informer has")
	fmt.Fprintln(w, "synced, which it checks once a second), and it adopts them. Floor: the same slices created one by one with")
	fmt.Fprintln(w, "the typed client; for a change, one update of the slice that holds the device, in place. The change is to device")
	fmt.Fprintf(w, "%d (the second slice); the unhealthy device stays in its slice, tainted.\n", draChanged)
	fmt.Fprintln(w, "\"Until the API showed it\": from the call until a watch of the node's slices (another client) showed the pool's newest")
	fmt.Fprintln(w, "generation complete with the wanted devices. Requests, writes and bytes: the publisher's client at its transport")
	fmt.Fprintf(w, "(JSON, the bridge's rate limit of %d requests a second, burst %d), up to %v after the API showed the step;\n", kube.ClientQPS, kube.ClientBurst, draSettle)
	fmt.Fprint(w, "sent = request ")
	fmt.Fprintln(w, "bodies, received = response bodies read (the library's informer's watch included). Target: a change to one")
	fmt.Fprintln(w, "device rewrites one slice.")
}

// report gives go test's benchmark line the main figures.
func (run *draRun) report(b *testing.B) {
	pub, pubFloor := run.figures(0, 0), run.figures(1, 0)
	b.ReportMetric(float64(pub.took)/1e6, "publish-ms")
	b.ReportMetric(float64(pub.took)/float64(pubFloor.took), "publish-x-floor")
	b.ReportMetric(float64(pub.reqs.sent), "publish-sent-B")
	b.ReportMetric(float64(run.size[0].json), "stored-json-B")
	for i, unit := range []string{"property", "unhealthy"} {
		f := run.figures(0, i+1) // the republishes' steps
		b.ReportMetric(float64(f.took)/1e6, unit+"-ms")
		b.ReportMetric(float64(f.reqs.writes()), unit+"-writes")
		b.ReportMetric(float64(f.reqs.sent), unit+"-sent-B")
	}
}

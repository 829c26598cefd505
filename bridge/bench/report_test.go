package bench

import (
	"fmt"

	"github.com/cdiexec/cdi/bridge/node"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Targets. They are judged in the tables' verdict columns, not by the
// exit status: a slow or busy machine must not turn a measurement into a
// failure.
const (
	maxBridgeAdds  = 2 * time.Millisecond  // median Allocate minus median ADD alone, local store
	maxPropagation = 50 * time.Millisecond // p99, response to the last affected stream
	// A bridge of up to 5,000 devices.
	maxStart               = 10 * time.Second // binary start to every plugin serving
	maxRSS                 = 150_000_000      // bytes, VmRSS once serving
	maxStop                = 2 * time.Second  // SIGTERM to exit
	maxGoroutinesPerPlugin = 5                // over the one-device bridge
)

func levelName(level string) string {
	switch level {
	case levelInstance:
		return "Instance level"
	case levelConfiguration:
		return "Configuration level"
	}
	return "its claim alone"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// floorOf returns the floor's row, and the local store's row at level.
func floorOf(results []result, level string) (floor, local stats) {
	for _, r := range results {
		switch {
		case r.store == "":
			floor = r.stats()
		case r.store == "local" && r.level == level:
			local = r.stats()
		}
	}
	return floor, local
}

// printAllocate prints the Allocate latencies against the ADD alone, and
// the kube store's against the local store's.
func printAllocate(w io.Writer, results []result, n int) {
	fmt.Fprintf(w, "\nBridge Allocate: the kubelet side's gRPC call to its response, through node.Node in-process over real unix\n")
	fmt.Fprintf(w, "sockets and the real generic-tty on the fixture (4 terminals, capacity 1); %d rounds after %d warm-up,\n", n, warmUp)
	fmt.Fprintln(w, "subjects interleaved; ms")
	tw := newTable(w)
	fmt.Fprintln(tw, "subject\tmedian\tp99\tx ADD alone\tbridge adds (median)\tx local store\tverdict")
	for _, r := range results {
		fmt.Fprintln(tw, allocateRow(r, results))
	}
	tw.Flush()
	for _, r := range results {
		if r.store == "local" && r.level != levelClaim {
			floor, _ := floorOf(results, r.level)
			fmt.Fprintf(w, "bridge adds %s ms at the median (%s, local store; target at most %s ms)\n",
				ms(r.stats().p50-floor.p50), levelName(r.level), ms(maxBridgeAdds))
		}
	}
	fmt.Fprintln(w, "ADD alone: the same plugin binary, drop-in, request-id and pinned device as the Instance-level Allocate, one exec.")
	fmt.Fprintln(w, "Claim alone: the store's Claim of that slot, which every Allocate makes before its ADD (the local store: a")
	fmt.Fprintln(w, "JSON file under flock, written and fsynced with its directory; the kube store: one API write).")
	fmt.Fprintln(w, "Undo between calls, untimed: the node's own slot reclaim (node.Reclaimer, no grace, a kubelet whose containers")
	fmt.Fprintln(w, "hold nothing): DEL on the plugin, the store's release, GC; then the streams must show every slot free again.")
}

// allocateRow is one line of the Allocate table, tab-separated.
func allocateRow(r result, results []result) string {
	s := r.stats()
	floor, local := floorOf(results, r.level)
	vsFloor, adds, vsLocal, verdict := "-", "-", "-", "-"
	if r.level != levelClaim {
		vsFloor = fmt.Sprintf("%.2f", float64(s.p50)/float64(floor.p50))
	}
	if r.store != "" && r.level != levelClaim {
		adds = ms(s.p50 - floor.p50)
	}
	if r.store == "kube" && local.p50 > 0 {
		vsLocal = fmt.Sprintf("%.2f", float64(s.p50)/float64(local.p50))
	}
	if r.store == "local" && r.level != levelClaim {
		verdict = judge(s.p50-floor.p50 <= maxBridgeAdds, fmt.Sprintf("adds %s ms > %s ms", ms(s.p50-floor.p50), ms(maxBridgeAdds)))
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", r.name, ms(s.p50), ms(s.p99), vsFloor, adds, vsLocal, verdict)
}

// printPropagation prints, for the same calls, when the updates reached
// the streams.
func printPropagation(w io.Writer, results []result) {
	fmt.Fprintf(w, "\nPropagation, same calls: the Allocate's response to its update arriving on every affected ListAndWatch stream\n")
	fmt.Fprintf(w, "(the device's Instance-level stream and the pool's); ms, negative = every update came before the response\n")
	tw := newTable(w)
	fmt.Fprintln(tw, "subject\tmedian\tp99\tmax\tbefore response\tfrom the call: median\tmax\tverdict")
	for _, r := range results {
		if r.store == "" || r.level == levelClaim {
			continue
		}
		s := r.stats()
		verdict := judge(s.prop99 < maxPropagation, fmt.Sprintf("p99 %s ms", ms(s.prop99)))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d of %d\t%s\t%s\t%s\n", r.name, ms(s.prop50), ms(s.prop99), ms(s.propMax),
			s.early, s.n, ms(s.fromCall50), ms(s.fromCallMax), verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "target: p99 under %s ms on one node. The claim is written before the plugin's ADD runs, so the update\n", ms(maxPropagation))
	fmt.Fprintln(w, "usually overtakes the response; \"from the call\" is the call's start to the last update.")
	fmt.Fprintln(w, "The rig's local store has its poll for other writers off (the rig is the file's only writer); on a node")
	fmt.Fprintln(w, "it also signals each of the bridge's own writes again, up to 250 ms later; streams whose lists did not change send nothing.")
}

// printWrites prints the kube store's API writes per allocation.
func printWrites(w io.Writer, results []result) {
	fmt.Fprintln(w, "\nKube store API writes per Allocate (the claim; the undo's release not counted)")
	tw := newTable(w)
	fmt.Fprintln(tw, "subject\tcalls\twrites per allocation\tmin\tmax\tverdict")
	for _, r := range results {
		if r.store != "kube" {
			continue
		}
		s := r.stats()
		verdict := judge(s.writesMin == 1 && s.writesMax == 1, fmt.Sprintf("%d to %d writes", s.writesMin, s.writesMax))
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%d\t%d\t%s\n", r.name, s.n, s.writesMean, s.writesMin, s.writesMax, verdict)
	}
	tw.Flush()
	fmt.Fprintln(w, "target: 1 write per allocation")
}

// printRaces prints the races for the last slot.
func printRaces(w io.Writer, races []raceResult) {
	fmt.Fprintln(w, "\nRace for the last slot: kube stores (one client each, as on their own nodes) claim the one free slot at once;")
	fmt.Fprintln(w, "every store sees it free before each round")
	tw := newTable(w)
	fmt.Fprintln(tw, "nodes\trounds\twins per node\tAPI writes per allocation\tconflict retries per allocation\tmax in a round\tlosers refused")
	for _, r := range races {
		wins := make([]string, len(r.wins))
		for i, n := range r.wins {
			wins[i] = fmt.Sprint(n)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.2f\t%.2f\t%d\t%d of %d\n", r.nodes, r.rounds, strings.Join(wins, "/"),
			float64(r.writes)/float64(r.rounds), float64(r.conflicts)/float64(r.rounds), r.maxConflicts,
			r.refused, r.rounds*(r.nodes-1))
	}
	tw.Flush()
	fmt.Fprintln(w, "one allocation per round: exactly one winner, every loser refused with ErrSlotTaken (checked)")
}

func judge(ok bool, miss string) string {
	if ok {
		return "met"
	}
	return "MISSED: " + miss
}

// scaleRow is the starts of one bridge size.
type scaleRow struct {
	devices, capacity int
	// perDevice gives every device its Instance-level resource
	// (--max-instance-level-devices 0); else the default limit applies.
	perDevice bool
	runs      []startRun
}

// plugins is how many device plugins the bridge serves: one per device
// and the pool's, or the pool's alone once the default limit applies.
func (r *scaleRow) plugins() int {
	if r.perDevice || r.devices <= node.DefaultMaxInstanceLevel {
		return r.devices + 1
	}
	return 1
}

// maxInstanceLevel is the bridge's --max-instance-level-devices.
func (r *scaleRow) maxInstanceLevel() int {
	if r.perDevice {
		return 0
	}
	return node.DefaultMaxInstanceLevel
}

func (r *scaleRow) name() string {
	level := "a resource per device"
	if r.plugins() == 1 {
		level = "the pool's resource only (default limit)"
	}
	return fmt.Sprintf("%d endpoints x capacity %d, %s", r.devices, r.capacity, level)
}

// scaleFigures are one size's figures over its runs: medians, and the
// worst start and shutdown.
type scaleFigures struct {
	ready, worst, stop       time.Duration
	rss, hwm                 int64
	goroutines, fds, threads int
}

func (r *scaleRow) figures() scaleFigures {
	var ds, ss []time.Duration
	var rs, hs []int64
	var gs, fs, ts []int
	for _, x := range r.runs {
		ds, ss, rs, hs = append(ds, x.ready), append(ss, x.stop), append(rs, x.rss), append(hs, x.hwm)
		gs, fs, ts = append(gs, x.goroutines), append(fs, x.fds), append(ts, x.threads)
	}
	return scaleFigures{ready: percentile(ds, 50), worst: percentile(ds, 100), stop: percentile(ss, 100),
		rss: percentile(rs, 50), hwm: percentile(hs, 100),
		goroutines: percentile(gs, 50), fds: percentile(fs, 50), threads: percentile(ts, 50)}
}

// verdict judges a big bridge against the per-node targets.
func (f scaleFigures) verdict(floor scaleFigures, plugins int) string {
	var miss []string
	if f.worst >= maxStart {
		miss = append(miss, fmt.Sprintf("ready in %.2f s", f.worst.Seconds()))
	}
	if f.rss >= maxRSS {
		miss = append(miss, fmt.Sprintf("VmRSS %.1f MB", float64(f.rss)/1e6))
	}
	if f.stop >= maxStop {
		miss = append(miss, fmt.Sprintf("stopped in %.2f s", f.stop.Seconds()))
	}
	if per := f.perPlugin(floor, plugins); per > maxGoroutinesPerPlugin {
		miss = append(miss, fmt.Sprintf("%.1f goroutines per plugin", per))
	}
	return judge(len(miss) == 0, strings.Join(miss, "; "))
}

// perPlugin is the goroutines each device plugin adds over the
// one-device bridge's two.
func (f scaleFigures) perPlugin(floor scaleFigures, plugins int) float64 {
	if plugins <= 2 {
		return 0
	}
	return float64(f.goroutines-floor.goroutines) / float64(plugins-2)
}

// printScale prints the binary's start-up, memory, goroutines, fds and
// shutdown for each size, the one-device bridge first as the floor.
func printScale(w io.Writer, rows []*scaleRow) {
	fmt.Fprintf(w, "\ncdi-bridge binary, start to serving to stopped: local store, endpoint plugin (probe off), %d runs each, interleaved;\n", len(rows[0].runs))
	fmt.Fprintln(w, "ready = every plugin registered with the kubelet side and its stream's list complete; figures once serving")
	tw := newTable(w)
	fmt.Fprintln(tw, "subject\tplugins\tready median s\tworst s\tVmRSS MB\tpeak MB\tRSS x floor\tgoroutines\tper plugin\tfds\tthreads\tstop worst s\tverdict")
	floor := rows[0].figures()
	for _, r := range rows {
		f := r.figures()
		verdict := "-"
		if r.devices > 1 {
			verdict = f.verdict(floor, r.plugins())
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.1f\t%.1f\t%.2f\t%d\t%.2f\t%d\t%d\t%.3f\t%s\n", r.name(),
			r.plugins(), f.ready.Seconds(), f.worst.Seconds(), float64(f.rss)/1e6, float64(f.hwm)/1e6, float64(f.rss)/float64(floor.rss),
			f.goroutines, f.perPlugin(floor, r.plugins()), f.fds, f.threads, f.stop.Seconds(), verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "targets, each size: ready under %.0f s (worst run), VmRSS under %.0f MB (median run), stopped under %.0f s after SIGTERM\n",
		maxStart.Seconds(), float64(maxRSS)/1e6, maxStop.Seconds())
	fmt.Fprintf(w, "(worst run), at most %d goroutines per device plugin over the one-device bridge (the kubelet API's floor with gRPC:\n", maxGoroutinesPerPlugin)
	fmt.Fprintln(w, "a socket's accept loop, the connection's reader, writer and keepalive, the ListAndWatch stream). MB = 10^6 bytes;")
	fmt.Fprintf(w, "figures read after 1 s of serving; peak = VmHWM up to then, worst run. Pools of more than %d devices get only the\n", node.DefaultMaxInstanceLevel)
	fmt.Fprintln(w, "pool's resource by default (--max-instance-level-devices); \"a resource per device\" sets it to 0.")
}

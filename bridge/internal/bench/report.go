package main

import (
	"fmt"
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
	maxStart       = 5 * time.Second       // binary start to every plugin serving, 200 devices
	maxRSS         = 100_000_000           // bytes, VmRSS once serving, 200 devices
)

func levelName(level string) string {
	switch level {
	case levelIL:
		return "Instance level"
	case levelCL:
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
	runs              []startRun
}

func (r scaleRow) medians() (ready, worst time.Duration, rss, hwm int64) {
	var ds []time.Duration
	var rs, hs []int64
	for _, x := range r.runs {
		ds, rs, hs = append(ds, x.ready), append(rs, x.rss), append(hs, x.hwm)
	}
	return percentile(ds, 50), percentile(ds, 100), percentile(rs, 50), percentile(hs, 100)
}

// printScale prints the binary's start-up and memory, the one-device
// bridge first as the floor.
func printScale(w io.Writer, floor, big scaleRow) {
	fmt.Fprintf(w, "\ncdi-bridge binary, start to serving: local store, endpoint plugin (probe off), %d runs each, interleaved;\n", len(big.runs))
	fmt.Fprintln(w, "ready = every plugin registered with the kubelet side and its stream's list complete; memory once serving")
	tw := newTable(w)
	fmt.Fprintln(tw, "subject\tplugins\tready median s\tworst s\tx floor\tVmRSS MB\tVmHWM MB (peak)\tRSS x floor\tverdict")
	fReady, _, fRSS, _ := floor.medians()
	for _, r := range []scaleRow{floor, big} {
		ready, worst, rss, hwm := r.medians()
		verdict := "-"
		if r.devices == big.devices {
			var miss []string
			if worst >= maxStart {
				miss = append(miss, fmt.Sprintf("ready in %.2f s", worst.Seconds()))
			}
			if rss >= maxRSS {
				miss = append(miss, fmt.Sprintf("VmRSS %.1f MB", float64(rss)/1e6))
			}
			verdict = judge(len(miss) == 0, strings.Join(miss, "; "))
		}
		fmt.Fprintf(tw, "%d endpoints x capacity %d\t%d\t%.3f\t%.3f\t%.2f\t%.1f\t%.1f\t%.2f\t%s\n", r.devices, r.capacity,
			r.devices+1, ready.Seconds(), worst.Seconds(), float64(ready)/float64(fReady),
			float64(rss)/1e6, float64(hwm)/1e6, float64(rss)/float64(fRSS), verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "targets for %d devices: ready under %.0f s (worst run), VmRSS under %.0f MB (median run); MB = 10^6 bytes;\n",
		big.devices, maxStart.Seconds(), float64(maxRSS)/1e6)
	fmt.Fprintln(w, "VmRSS read after 1 s of serving, VmHWM the worst run's peak up to then.")
}

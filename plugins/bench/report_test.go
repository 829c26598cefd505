package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// printTable prints the round trips with their ratios to the floor, the
// state floor and host-local, their CPU time against host-local's, and
// each plugin's verdict against the targets: an ADD+DEL median below host-local's, and no grpc or
// client-go linked. The state floor is the least a call that keeps its
// state as SPEC.md requires can cost, so its ratio is what a plugin adds
// of its own: reported, not judged. (Its 1.15x target, and the 1.5x
// floor target before it, are retired.)
func printTable(w io.Writer, rows []row, n int) {
	var floor, stateFloor, hl, hlCPU time.Duration
	for _, r := range rows {
		switch r.kind {
		case kindFloor:
			floor = r.p50
		case kindStateFloor:
			stateFloor = r.p50
		case kindHostLocal:
			hl, hlCPU = r.p50, r.cpu
		}
	}
	fmt.Fprintf(w, "\nADD+DEL round trip through exec: %d rounds after %d warm-up, subjects interleaved; ms\n", n, warmUp)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "subject\tmedian\tp90\tx floor\tx state floor\tx state floor 95%\tx host-local\tCPU\tCPU x host-local\tsize MiB\tgrpc/client-go\tverdict")
	missed := 0
	for _, r := range rows {
		v := verdict(r, hl)
		if strings.HasPrefix(v, "MISSED") {
			missed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%.2f-%.2f\t%s\t%s\t%s\t%.1f\t%s\t%s\n", r.name, ms(r.p50), ms(r.p90), float64(r.p50)/float64(floor),
			float64(r.p50)/float64(stateFloor), r.stateLo, r.stateHi, ratio(r.p50, hl), ms(r.cpu), ratio(r.cpu, hlCPU),
			r.sizeMiB, linksColumn(r.links), v)
	}
	tw.Flush()
	fmt.Fprintln(w, "targets: median < host-local, no grpc/client-go in build info; x state floor is reported, not judged")
	fmt.Fprintln(w, "CPU: median user+system time of a round trip's processes (getrusage of the waited-for children); the median")
	fmt.Fprintln(w, "  above less CPU is waiting (for the disk's fsync, for a turn on a busy CPU), which grows with the machine's load")
	fmt.Fprintf(w, "x state floor 95%%: bootstrap interval of the ratio over the %d rounds (%d resamples of whole rounds). The interval is the\n", n, resamples)
	fmt.Fprintln(w, "  spread within this run; it does not cover differences between runs, which only another run shows")
	printStateFloorNote(w, floor, stateFloor)
	if hl == 0 {
		fmt.Fprintln(w, "host-local: not measured (see stderr); plugins judged against the floor only")
	}
	if missed > 0 {
		fmt.Fprintf(w, "%d of %d plugins MISSED a target; a missed target does not fail the benchmark (a measurement, not a test)\n", missed, countKind(rows, kindPlugin))
	} else {
		fmt.Fprintln(w, "every plugin met every target")
	}
}

// ratio is a/b to two places, or "-" when b was not measured.
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// printStateFloorNote says what the state rule alone costs: the state
// floor does nothing but what SPEC.md requires of every saved change, so
// no plugin can be faster than it.
func printStateFloorNote(w io.Writer, floor, stateFloor time.Duration) {
	fmt.Fprintf(w, "state floor: the floor plus only what SPEC.md requires of a saved change (boot id, flock, read, write, fsync, rename), %.2fx floor;\n",
		float64(stateFloor)/float64(floor))
	fmt.Fprintln(w, "  what a plugin takes above it is configuration, discovery, allocation and encoding")
}

// verdict judges a plugin row against the targets, naming each miss.
func verdict(r row, hl time.Duration) string {
	if r.kind != kindPlugin {
		return "-"
	}
	var miss []string
	if hl > 0 && r.p50 >= hl {
		miss = append(miss, "not below host-local")
	}
	if len(r.links) > 0 {
		miss = append(miss, "links "+strings.Join(r.links, ","))
	}
	if len(miss) == 0 {
		return "met"
	}
	return "MISSED: " + strings.Join(miss, "; ")
}

func linksColumn(links []string) string {
	if len(links) == 0 {
		return "no"
	}
	return "YES " + strings.Join(links, ",")
}

func countKind(rows []row, k kind) int {
	n := 0
	for _, r := range rows {
		if r.kind == k {
			n++
		}
	}
	return n
}

func printContention(w io.Writer, c contention, d time.Duration) {
	secs := c.elapsed.Seconds()
	fmt.Fprintf(w, "\n%d processes at once: generic-tty ADD tty:1 then DEL, one state file, %d terminals, %v (asked %v)\n", workers, c.terminals, c.elapsed.Round(time.Millisecond), d)
	fmt.Fprintf(w, "  operations: %d ADD + %d DEL = %.0f per second (%.0f granted ADD+DEL cycles per second)\n",
		c.ok+c.insufficient, c.del, float64(c.ok+c.insufficient+c.del)/secs, float64(c.ok)/secs)
	fmt.Fprintf(w, "  ADD outcomes: ok %d, insufficient (code %d) %d\n", c.ok, codeInsufficient, c.insufficient)
	if c.leftOver == 0 {
		fmt.Fprintln(w, "  LIST after all DELs: empty")
	} else {
		fmt.Fprintf(w, "  LIST after all DELs: %d allocations LEFT (correctness failure)\n", c.leftOver)
	}
	fmt.Fprintf(w, "  double handouts: %d\n", c.doubles)
}

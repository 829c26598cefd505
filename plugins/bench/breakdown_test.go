package bench

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"text/tabwriter"
	"time"
)

// The breakdown answers the question a missed target raises: is a
// plugin's ADD+DEL slow because the process is slow to start, or because
// of what it does once started? Each call is timed alone, and VERSION,
// which reads no stdin and touches no state, stands for start-up.

// phaseSubject is a plugin whose calls are timed one by one.
type phaseSubject struct {
	name, bin, request string
	conf               []byte
}

// phaseRow holds the medians of one plugin's calls, one exec each.
type phaseRow struct {
	name              string
	version, add, del sample
}

// sample is one step (an exec, or a round trip of two) as the breakdown
// and the round-trip table see it, or the medians of many.
type sample struct {
	wall time.Duration
	// faults are the minor page faults the kernel accounted to the
	// processes: each is a fresh page mapped in, and on some machines
	// (virtual ones especially) they are most of what an exec costs.
	faults int64
	// cpu is the processes' user and system time: the wall time less
	// what they waited for (the disk's fsync, a turn on a busy CPU).
	cpu time.Duration
}

// timed runs step and measures it. Steps run one at a time here, so the
// growth of RUSAGE_CHILDREN across a step is the processes it waited for.
func timed(step func() error) (sample, error) {
	before := childUsage()
	start := time.Now()
	err := step()
	wall, after := time.Since(start), childUsage()
	return sample{wall: wall, faults: after.faults - before.faults, cpu: after.cpu - before.cpu}, err
}

// childUsage is RUSAGE_CHILDREN's faults and CPU time so far.
func childUsage() sample {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return sample{}
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return sample{faults: ru.Minflt, cpu: cpu}
}

// medianSample is the median of each of wall time, faults and CPU time.
func medianSample(s []sample) sample {
	walls, faults, cpu := make([]time.Duration, len(s)), make([]int64, len(s)), make([]time.Duration, len(s))
	for i, x := range s {
		walls[i], faults[i], cpu[i] = x.wall, x.faults, x.cpu
	}
	return sample{wall: percentile(walls, 50), faults: percentile(faults, 50), cpu: percentile(cpu, 50)}
}

// floors are the breakdown's two reference execs: the floor, and the page
// floor, which is the floor writing to fresh pages of its own heap.
type floors struct{ bare, paged sample }

// pageCost is what one fresh page cost on this machine: the page floor's
// extra time over its extra faults. It is 0 when the page floor mapped
// too few more pages for the price to mean anything (on a kernel that
// backs the heap with huge pages, say).
func (f floors) pageCost() time.Duration {
	extra := f.paged.faults - f.bare.faults
	if extra < 64 || f.paged.wall <= f.bare.wall {
		return 0
	}
	return (f.paged.wall - f.bare.wall) / time.Duration(extra)
}

// breakdown times, interleaved as measure does and after the same
// warm-up, one exec of each floor and each plugin's VERSION, ADD and DEL.
func breakdown(ctx context.Context, floorBin, pageFloorBin string, plugins []phaseSubject, n int) (floors, []phaseRow, error) {
	progress("timing %d rounds of one exec of each floor and each plugin's VERSION, ADD and DEL alone", n)
	var bare, paged []sample
	d := make([][3][]sample, len(plugins))
	for i := -warmUp; i < n; i++ {
		b, err := timed(func() error { _, err := call(ctx, floorBin, nil, nil); return err })
		if err != nil {
			return floors{}, nil, err
		}
		pg, err := timed(func() error { _, err := call(ctx, pageFloorBin, nil, nil); return err })
		if err != nil {
			return floors{}, nil, fmt.Errorf("page floor: %w", err)
		}
		if i >= 0 {
			bare, paged = append(bare, b), append(paged, pg)
		}
		for j, p := range plugins {
			ts, err := p.phases(ctx, i)
			if err != nil {
				return floors{}, nil, err
			}
			if i < 0 {
				continue // warm-up
			}
			for k := range ts {
				d[j][k] = append(d[j][k], ts[k])
			}
		}
	}
	rows := make([]phaseRow, len(plugins))
	for j, p := range plugins {
		rows[j] = phaseRow{name: p.name, version: medianSample(d[j][0]), add: medianSample(d[j][1]), del: medianSample(d[j][2])}
	}
	return floors{bare: medianSample(bare), paged: medianSample(paged)}, rows, nil
}

// phases times VERSION, ADD and DEL of one request-id.
func (p phaseSubject) phases(ctx context.Context, i int) ([3]sample, error) {
	id := fmt.Sprintf("phase%d", i+1000)
	steps := [3]func() error{
		func() error { return versionCall(ctx, p.bin) },
		func() error { return addCall(ctx, p.bin, p.conf, p.request, id) },
		func() error { return delCall(ctx, p.bin, p.conf, id) },
	}
	var ts [3]sample
	for k, step := range steps {
		s, err := timed(step)
		if err != nil {
			return ts, fmt.Errorf("%s: %w", p.name, err)
		}
		ts[k] = s
	}
	return ts, nil
}

// printBreakdown splits each plugin's ADD+DEL into the two execs any
// binary pays (the floor's), the plugin's start-up beyond the floor's,
// and the work after start-up, next to what the target (hostLocal,
// host-local's round trip in the table; 0 when it was not measured)
// leaves over the floor's two execs, and names the larger of the two parts over the
// floor. The page faults of each call stand beside the times, and the
// faults above the floor's two execs are priced at this machine's page
// cost: start-up and work alike cost in fresh pages as much as in
// instructions, and how much a page costs is what differs most between
// machines.
func printBreakdown(w io.Writer, f floors, hostLocal time.Duration, rows []phaseRow, n int) {
	floor, price := f.bare, f.pageCost()
	budget := "-"
	if hostLocal > 0 {
		budget = ms(hostLocal - 2*floor.wall)
	}
	fmt.Fprintf(w, "\nWhere ADD+DEL goes: each call one exec, timed alone; medians of %d rounds, interleaved; ms\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "plugin\tADD\tDEL\tVERSION\t= 2 floor execs\t+ start-up surplus\t+ work\tbudget over floor\tmost of the excess\tpage faults VERSION/ADD/DEL\tfaults over floor: ms")
	for _, r := range rows {
		total := r.add.wall + r.del.wall
		execs := 2 * floor.wall
		surplus := 2 * (r.version.wall - floor.wall)
		work := total - 2*r.version.wall
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t%s\n", r.name, ms(r.add.wall), ms(r.del.wall), ms(r.version.wall),
			ms(execs), ms(surplus), ms(work), budget, dominant(surplus, work), r.version.faults, r.add.faults, r.del.faults,
			pricedFaults(r.add.faults+r.del.faults-2*floor.faults, price))
	}
	tw.Flush()
	fmt.Fprintf(w, "floor exec %s ms, %d page faults. start-up surplus = 2 x (VERSION - floor exec): the bigger binary and its init;\n", ms(floor.wall), floor.faults)
	fmt.Fprintln(w, "work = ADD + DEL - 2 x VERSION: configuration, fixture scan, lock, state file write and sync;")
	fmt.Fprintln(w, "budget over floor = what the target, host-local's round trip above, allows above the floor's two execs;")
	fmt.Fprintln(w, "page faults = minor faults of the exec (getrusage of the waited-for child), each a fresh page mapped in;")
	printPageCost(w, f)
}

// pricedFaults is a count of faults and, where the page cost is known,
// what they cost at it: "+98: 1.57".
func pricedFaults(faults int64, price time.Duration) string {
	if price == 0 {
		return fmt.Sprintf("%+d: -", faults)
	}
	return fmt.Sprintf("%+d: %s", faults, ms(time.Duration(faults)*price))
}

// printPageCost says what a fresh page cost and how it was measured.
func printPageCost(w io.Writer, f floors) {
	extra := f.paged.faults - f.bare.faults
	price := f.pageCost()
	if price == 0 {
		fmt.Fprintf(w, "page cost: not measured; the page floor made %d more faults than the floor and took %s ms longer, too little to price a page\n",
			extra, ms(f.paged.wall-f.bare.wall))
		return
	}
	fmt.Fprintf(w, "page cost: %.1f us a fresh page here (the page floor, the floor writing to fresh heap pages, took %s ms longer\n",
		float64(price)/float64(time.Microsecond), ms(f.paged.wall-f.bare.wall))
	fmt.Fprintf(w, "  for %d more faults); faults over floor = ADD + DEL faults - 2 x the floor's, and what they cost at that price\n", extra)
}

// dominant names the larger part of the cost above the floor's execs and
// its share of that excess.
func dominant(surplus, work time.Duration) string {
	excess := max(surplus, 0) + max(work, 0)
	if excess == 0 {
		return "-"
	}
	if work >= surplus {
		return fmt.Sprintf("work (%.0f%%)", 100*float64(max(work, 0))/float64(excess))
	}
	return fmt.Sprintf("start-up (%.0f%%)", 100*float64(max(surplus, 0))/float64(excess))
}

package main

import (
	"context"
	"fmt"
	"io"
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
	version, add, del time.Duration
}

// breakdown times, interleaved as measure does and after the same
// warm-up, one exec of the floor and each plugin's VERSION, ADD and DEL.
func breakdown(ctx context.Context, floorBin string, plugins []phaseSubject, n int) (time.Duration, []phaseRow, error) {
	progress("timing %d rounds of one floor exec and each plugin's VERSION, ADD and DEL alone", n)
	var floor []time.Duration
	d := make([][3][]time.Duration, len(plugins))
	for i := -warmUp; i < n; i++ {
		start := time.Now()
		if _, err := call(ctx, floorBin, nil, nil); err != nil {
			return 0, nil, err
		}
		if i >= 0 {
			floor = append(floor, time.Since(start))
		}
		for j, p := range plugins {
			ts, err := p.phases(ctx, i)
			if err != nil {
				return 0, nil, err
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
		rows[j] = phaseRow{name: p.name, version: percentile(d[j][0], 50), add: percentile(d[j][1], 50), del: percentile(d[j][2], 50)}
	}
	return percentile(floor, 50), rows, nil
}

// phases times VERSION, ADD and DEL of one request-id.
func (p phaseSubject) phases(ctx context.Context, i int) ([3]time.Duration, error) {
	id := fmt.Sprintf("phase%d", i+1000)
	steps := [3]func() error{
		func() error { return versionCall(ctx, p.bin) },
		func() error { return addCall(ctx, p.bin, p.conf, p.request, id) },
		func() error { return delCall(ctx, p.bin, p.conf, id) },
	}
	var ts [3]time.Duration
	for k, step := range steps {
		start := time.Now()
		if err := step(); err != nil {
			return ts, fmt.Errorf("%s: %w", p.name, err)
		}
		ts[k] = time.Since(start)
	}
	return ts, nil
}

// printBreakdown splits each plugin's ADD+DEL into the two execs any
// binary pays (the floor's), the plugin's start-up beyond the floor's,
// and the work after start-up, next to what the 1.5x target leaves over
// the floor, and names the larger of the two parts over the floor.
func printBreakdown(w io.Writer, floorExec time.Duration, rows []phaseRow, n int) {
	budget := time.Duration((maxFloorRatio - 1) * 2 * float64(floorExec))
	fmt.Fprintf(w, "\nWhere ADD+DEL goes: each call one exec, timed alone; medians of %d rounds, interleaved; ms\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "plugin\tADD\tDEL\tVERSION\t= 2 floor execs\t+ start-up surplus\t+ work\tbudget over floor\tmost of the excess")
	for _, r := range rows {
		total := r.add + r.del
		execs := 2 * floorExec
		surplus := 2 * (r.version - floorExec)
		work := total - 2*r.version
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, ms(r.add), ms(r.del), ms(r.version),
			ms(execs), ms(surplus), ms(work), ms(budget), dominant(surplus, work))
	}
	tw.Flush()
	fmt.Fprintf(w, "floor exec %s ms. start-up surplus = 2 x (VERSION - floor exec): the bigger binary and its init;\n", ms(floorExec))
	fmt.Fprintln(w, "work = ADD + DEL - 2 x VERSION: configuration, fixture scan, lock, state file write and sync;")
	fmt.Fprintf(w, "budget over floor = what the %.1fx target allows above the floor's two execs.\n", maxFloorRatio)
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

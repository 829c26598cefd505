package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// printTable prints the round trips with their ratios to the floor and
// to host-local, and each plugin's verdict against the targets.
func printTable(w io.Writer, rows []row, n int) {
	var floor, hl time.Duration
	for _, r := range rows {
		if r.isFloor {
			floor = r.p50
		}
		if r.hostLocal {
			hl = r.p50
		}
	}
	fmt.Fprintf(w, "\nADD+DEL round trip through exec (%d rounds; medians and p90 in ms)\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tmedian\tp90\tx floor\tx host-local\tsize MiB\tgrpc/client-go\ttarget\t")
	for _, r := range rows {
		vsHL, verdict, links := "-", "", ""
		if hl > 0 {
			vsHL = fmt.Sprintf("%.2f", float64(r.p50)/float64(hl))
		}
		if !r.isFloor && !r.hostLocal {
			verdict = "met"
			if float64(r.p50) > 1.5*float64(floor) || (hl > 0 && r.p50 >= hl) {
				verdict = "MISSED"
			}
			links = "no"
			if r.cluster {
				links, verdict = "YES", "MISSED"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%.1f\t%s\t%s\t\n", r.name, ms(r.p50), ms(r.p90), float64(r.p50)/float64(floor), vsHL, r.size, links, verdict)
	}
	tw.Flush()
	fmt.Fprintln(w, "target: median at most 1.5x the floor and below host-local; no grpc or client-go linked")
}

func printContention(w io.Writer, c contention) {
	fmt.Fprintf(w, "\n64 processes, ADD tty:1 then DEL, one state file, 16 terminals, %v\n", c.elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  execs: %d (%.0f per second)\n", c.execs, float64(c.execs)/c.elapsed.Seconds())
	fmt.Fprintf(w, "  ADDs granted: %d, denied for lack of a free terminal: %d\n", c.granted, c.denied)
	fmt.Fprintf(w, "  units handed out twice: %d\n", c.doubles)
}

// withReserved sets num_system_reserved in a drop-in, to make the
// terminals scarce enough that the processes contend.
func withReserved(conf []byte, n int) []byte {
	var c map[string]any
	if json.Unmarshal(conf, &c) != nil {
		return conf
	}
	if args, ok := c["args"].(map[string]any); ok {
		args["num_system_reserved"] = n
	}
	out, err := json.Marshal(c)
	if err != nil {
		return conf
	}
	return out
}

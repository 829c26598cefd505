package conformance

import (
	"fmt"
	"io"
	"strings"
)

// WriteTable prints the report: a heading, one row per rule with its
// verdict and SPEC.md section, the detail of a failure or a skip indented
// below its row, and a count of each verdict.
func (r *Report) WriteTable(w io.Writer) {
	state := "scratch state directories in place of args.stateDir"
	if !r.ScratchState {
		state = "the plugin's own state (the drop-in has no args.stateDir)"
	}
	version := "protocol " + r.Version
	if r.Version == "" {
		version = r.NoVersion
	}
	fmt.Fprintf(w, "Conformance of %s\ntype %s, %s, %s\n\n", r.Plugin, r.Type, version, state)
	// Columns by hand: a detail line would end a tabwriter's column block.
	width := len("RULE")
	for _, res := range r.Results {
		width = max(width, len(res.Rule))
	}
	fmt.Fprintf(w, "%-6s  %-*s  %s\n", "RESULT", width, "RULE", "SECTION")
	counts := map[Status]int{}
	for _, res := range r.Results {
		counts[res.Status]++
		fmt.Fprintf(w, "%-6s  %-*s  %s\n", res.Status, width, res.Rule, res.Section)
		writeDetail(w, res.Detail)
	}
	fmt.Fprintf(w, "\n%d rules: %d passed, %d failed, %d skipped\n", len(r.Results), counts[Pass], counts[Fail], counts[Skip])
}

// maxDetailLines bounds the lines shown under one rule: the first few
// problems say what is wrong; the rest are more of the same.
const maxDetailLines = 8

func writeDetail(w io.Writer, detail string) {
	var lines []string
	for _, line := range strings.Split(detail, "\n") {
		if line != "" {
			lines = append(lines, line)
		}
	}
	for i, line := range lines {
		if i == maxDetailLines {
			fmt.Fprintf(w, "        ... and %d more\n", len(lines)-i)
			return
		}
		fmt.Fprintf(w, "        %s\n", line)
	}
}

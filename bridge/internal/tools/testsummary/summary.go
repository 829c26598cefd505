package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail
	Test       string
	Elapsed    float64
	Output     string
}

// summary follows one go test -json stream.
type summary struct {
	out     io.Writer
	verbose bool
	// output holds each running test's (and package's) output, by
	// "package test", until it ends: only a failure's is printed.
	output map[string][]string
	// running holds, by package, the tests started and not yet ended,
	// in start order. A package that times out ends with some of them
	// running, the panic and its goroutines in their output.
	running map[string][]string
	c       counts
}

func newSummary(out io.Writer, verbose bool) *summary {
	return &summary{out: out, verbose: verbose, output: map[string][]string{}, running: map[string][]string{}, c: counts{Skips: map[string]int{}}}
}

// read consumes the stream. A line that is not JSON (go test's own
// errors before any test runs) is printed as it is.
func (s *summary) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.out, sc.Text())
			continue
		}
		s.c.Events++
		s.handle(e)
	}
	return sc.Err()
}

func (s *summary) handle(e event) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "output", "build-output":
		if s.verbose {
			fmt.Fprint(s.out, e.Output)
		}
		if e.Action == "build-output" {
			key = e.ImportPath + " "
		}
		s.output[key] = append(s.output[key], e.Output)
	case "build-fail":
		s.printOutput(e.ImportPath + " ")
		s.c.PackagesFailed++
	case "run":
		s.running[e.Package] = append(s.running[e.Package], e.Test)
	case "pass", "fail", "skip":
		s.end(e, key)
	}
}

// end records a test's or a package's end.
func (s *summary) end(e event, key string) {
	defer delete(s.output, key)
	if e.Test != "" {
		s.running[e.Package] = slices.DeleteFunc(s.running[e.Package], func(t string) bool { return t == e.Test })
		s.endTest(e, key)
		return
	}
	s.endUnfinished(e.Package)
	s.endPackage(e, key)
}

// endPackage records a package's end, and prints its line unless the
// verbose output, which holds go test's own, has printed it.
func (s *summary) endPackage(e event, key string) {
	switch e.Action {
	case "pass":
		s.c.PackagesOK++
		if !s.verbose {
			fmt.Fprintf(s.out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
	case "skip":
		s.c.PackagesNoTests++
		if !s.verbose {
			fmt.Fprintf(s.out, "?   \t%s\t[no test files]\n", e.Package)
		}
	case "fail":
		s.c.PackagesFailed++
		if !s.verbose {
			// The package's own output ends with go test's FAIL line.
			s.printOutput(key)
		}
	}
}

// endUnfinished fails the tests of pkg that were still running when it
// ended (it timed out, or a test called os.Exit): go test sends no end
// for them, and their output holds why.
func (s *summary) endUnfinished(pkg string) {
	for _, test := range s.running[pkg] {
		key := pkg + " " + test
		s.c.TestsFailed++
		if !s.verbose {
			s.printOutput(key)
			fmt.Fprintf(s.out, "--- UNFINISHED: %s\n", test)
		}
		delete(s.output, key)
	}
	delete(s.running, pkg)
}

func (s *summary) endTest(e event, key string) {
	switch e.Action {
	case "pass":
		s.c.TestsPassed++
	case "skip":
		s.c.TestsSkipped++
		s.c.Skips[skipReason(s.output[key])]++
	case "fail":
		s.c.TestsFailed++
		if !s.verbose {
			s.printOutput(key)
		}
	}
}

func (s *summary) printOutput(key string) {
	for _, line := range s.output[key] {
		fmt.Fprint(s.out, line)
	}
}

// skipReason is what a skipped test said: its output without the
// "=== RUN" and "--- SKIP" lines and without the file:line prefix.
func skipReason(output []string) string {
	var said []string
	for _, line := range output {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
			continue
		}
		if _, msg, ok := strings.Cut(line, ": "); ok && strings.Contains(line[:len(line)-len(msg)], ".go:") {
			line = msg
		}
		said = append(said, line)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " ")
}

func (s *summary) counts() counts { return s.c }

// counts are one run's, or the sum of several.
type counts struct {
	Events                                      int
	PackagesOK, PackagesFailed, PackagesNoTests int
	TestsPassed, TestsFailed, TestsSkipped      int
	Skips                                       map[string]int // reason -> tests
}

func (c *counts) add(o counts) {
	c.Events += o.Events
	c.PackagesOK += o.PackagesOK
	c.PackagesFailed += o.PackagesFailed
	c.PackagesNoTests += o.PackagesNoTests
	c.TestsPassed += o.TestsPassed
	c.TestsFailed += o.TestsFailed
	c.TestsSkipped += o.TestsSkipped
	if c.Skips == nil {
		c.Skips = map[string]int{}
	}
	for r, n := range o.Skips {
		c.Skips[r] += n
	}
}

// line is the summary: counts, then each skip reason with its tests,
// most frequent first.
func (c counts) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s ok, %d failed, %d without tests; %s passed, %d failed, %d skipped",
		plural(c.PackagesOK, "package"), c.PackagesFailed, c.PackagesNoTests, plural(c.TestsPassed, "test"), c.TestsFailed, c.TestsSkipped)
	reasons := make([]string, 0, len(c.Skips))
	for r := range c.Skips {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		ri, rj := reasons[i], reasons[j]
		return c.Skips[ri] > c.Skips[rj] || c.Skips[ri] == c.Skips[rj] && ri < rj
	})
	for _, r := range reasons {
		fmt.Fprintf(&b, "\n  skipped %d: %s", c.Skips[r], r)
	}
	return b.String()
}

// appendCounts adds c to file as one JSON line.
func appendCounts(file string, c counts) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("tally: %w", err)
	}
	line, _ := json.Marshal(struct {
		counts
		At time.Time
	}{c, time.Now()})
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}

// readCounts reads every run file holds.
func readCounts(file string) ([]counts, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tally: %w", err)
	}
	var all []counts
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var c counts
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("tally %s: %w", file, err)
		}
		all = append(all, c)
	}
	return all, nil
}

// plural is "1 test", "2 tests".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

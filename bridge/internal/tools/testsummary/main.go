// Command testsummary reads `go test -json` on stdin and prints what
// `go test` would (a line per package, the output of each failed test,
// and of each test still running when its package timed out or exited)
// and then one line that counts packages and tests, skipped ones with
// their reasons. With -tally FILE it also adds its counts to FILE, and
// -total FILE prints the counts of every run added there: make test ends
// with that line. It exits 1 when a package or test failed, or when no
// test event came (go test could not start).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	verbose := flag.Bool("v", false, "print every test's output as it comes, as go test -v does")
	tally := flag.String("tally", "", "add this run's counts to this file (JSON lines)")
	total := flag.String("total", "", "print the counts of every run in this file, and read no input")
	flag.Parse()
	if *total != "" {
		os.Exit(printTotal(os.Stdout, *total))
	}
	os.Exit(run(os.Stdin, os.Stdout, *verbose, *tally))
}

// run summarizes one go test run and returns the exit status.
func run(in io.Reader, out io.Writer, verbose bool, tallyFile string) int {
	s := newSummary(out, verbose)
	if err := s.read(in); err != nil {
		fmt.Fprintln(out, "testsummary:", err)
		return 1
	}
	c := s.counts()
	fmt.Fprintln(out, c.line())
	if tallyFile != "" {
		if err := appendCounts(tallyFile, c); err != nil {
			fmt.Fprintln(out, "testsummary:", err)
			return 1
		}
	}
	if c.Events == 0 {
		fmt.Fprintln(out, "testsummary: no test events: go test did not run")
		return 1
	}
	if c.PackagesFailed > 0 || c.TestsFailed > 0 {
		return 1
	}
	return 0
}

// printTotal prints the sum of the counts in file.
func printTotal(out io.Writer, file string) int {
	all, err := readCounts(file)
	if err != nil {
		fmt.Fprintln(out, "testsummary:", err)
		return 1
	}
	var sum counts
	for _, c := range all {
		sum.add(c)
	}
	fmt.Fprintf(out, "all tests (%d runs): %s\n", len(all), sum.line())
	return 0
}

// Command buildprogress turns `go build -v`'s stream of compiled package
// names (stdin) into a progress line every tenth of the way, so that a
// cold build of minutes is not silent; every other line (a compile
// error) is passed on as it is. A warm build compiles nothing and prints
// nothing.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	total := flag.Int("total", 0, "packages the build has at most (go list -deps | wc -l)")
	what := flag.String("what", "build", "what is being built, for the progress lines")
	flag.Parse()
	if err := follow(os.Stdin, os.Stdout, *what, *total, time.Now); err != nil {
		fmt.Fprintln(os.Stderr, "buildprogress:", err)
		os.Exit(1)
	}
}

// follow copies in to out as progress lines.
func follow(in io.Reader, out io.Writer, what string, total int, now func() time.Time) error {
	start := now()
	step := max(total/10, 1)
	compiled := 0
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if !isPackage(line) {
			fmt.Fprintln(out, line)
			continue
		}
		compiled++
		if compiled%step == 0 {
			fmt.Fprintf(out, "%s: %d of at most %d packages compiled (%v)\n", what, compiled, total, now().Sub(start).Round(time.Second))
		}
	}
	if compiled > 0 {
		fmt.Fprintf(out, "%s: %d packages compiled in %v\n", what, compiled, now().Sub(start).Round(time.Second))
	}
	return sc.Err()
}

// isPackage says whether a line of go build -v is a package path: one
// word, no file position, no "#" header of a package's errors.
func isPackage(line string) bool {
	return line != "" && !strings.ContainsAny(line, " \t:#")
}

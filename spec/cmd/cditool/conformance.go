package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/conformance"
	"github.com/cdiexec/cdi/spec/invoke"
)

// runConformance checks the plugin against SPEC.md with the drop-in on
// stdin and prints the table of rules; it returns 0 when no rule failed.
func runConformance(ctx context.Context, o *options, c *command, stdin io.Reader, stdout, stderr io.Writer) int {
	dropIn, err := readDropIn(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "cditool: conformance: %v\n", err)
		return exitUsage
	}
	path, err := findPlugin(c.plugin, invoke.SplitPath(o.path))
	if err != nil {
		fmt.Fprintf(stderr, "cditool: conformance: %v\n", err)
		return exitFailure
	}
	report, err := conformance.Run(ctx, conformance.Options{Plugin: path, DropIn: dropIn, Timeout: o.timeout})
	if err != nil {
		fmt.Fprintf(stderr, "cditool: conformance: %v\n", err)
		if errors.Is(err, conformance.ErrDropIn) {
			return exitUsage
		}
		return exitFailure
	}
	report.WriteTable(stdout)
	if report.Failed() {
		return exitPluginError
	}
	return exitOK
}

// readDropIn reads the drop-in from stdin, refusing a terminal: a
// forgotten "< drop-in" would otherwise wait for typing.
func readDropIn(stdin io.Reader) ([]byte, error) {
	if f, ok := stdin.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return nil, errors.New("give the drop-in on stdin: cditool conformance <plugin> < drop-in.conf")
		}
	}
	data, err := io.ReadAll(io.LimitReader(stdin, spec.MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading the drop-in from stdin: %w", err)
	}
	return data, nil
}

// findPlugin takes a path as it is and looks a bare name up in dirs, as a
// drop-in's plugin is found.
func findPlugin(plugin string, dirs []string) (string, error) {
	if !strings.ContainsRune(plugin, os.PathSeparator) {
		return invoke.FindInPath(plugin, dirs)
	}
	fi, err := os.Stat(plugin)
	if err != nil {
		return "", fmt.Errorf("%w: %w", invoke.ErrNotFound, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file", invoke.ErrNotFound, plugin)
	}
	return plugin, nil
}

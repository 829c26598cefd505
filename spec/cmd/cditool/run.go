package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/buildinfo"
	"github.com/cdiexec/cdi/spec/invoke"
)

// run is cditool without the process around it; it returns the exit
// status. stdin is read by the conformance command only.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, fs, pos, err := parseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) || (err == nil && len(pos) == 1 && pos[0] == "help") {
		printUsage(stdout, fs)
		return exitOK
	}
	if err == nil && o.version {
		fmt.Fprintln(stdout, "cditool", buildinfo.Version())
		return exitOK
	}
	if err == nil {
		var c *command
		if c, err = parseCommand(o, pos); err == nil && c.name == "conformance" {
			return runConformance(ctx, o, c, stdin, stdout, stderr)
		}
		if err == nil {
			return runCommand(ctx, o, c, stdout, stderr)
		}
	}
	if !errors.Is(err, errFlags) { // the flag package printed those itself
		fmt.Fprintf(stderr, "cditool: %v\n", err)
	}
	fmt.Fprintln(stderr, `Run "cditool --help" for usage.`)
	return exitUsage
}

func runCommand(ctx context.Context, o *options, c *command, stdout, stderr io.Writer) int {
	confs, err := selectConfs(o, c, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cditool: %v\n", err)
		return exitUsage
	}
	status := exitOK
	for _, conf := range confs {
		status = max(status, runConf(ctx, o, c, conf, stdout, stderr))
	}
	return status
}

// runConf runs the command against one drop-in and prints the outcome.
func runConf(ctx context.Context, o *options, c *command, conf *invoke.Conf, stdout, stderr io.Writer) int {
	label := confLabel(o, conf)
	p, err := invoke.NewPlugin(conf, invoke.SplitPath(o.path))
	if err != nil {
		fmt.Fprintf(stderr, "cditool: %s: %v\n", label, err)
		return exitFailure
	}
	rec := &recorder{exec: invoke.ProcessExec{}}
	p.Exec, p.Timeout, p.CDIVersion, p.Stderr = rec, o.timeout, o.cdiVersion, stderr
	render, err := perform(ctx, c, p)
	if err != nil {
		return reportError(o, c, label, rec, err, stderr)
	}
	if o.json {
		writeDocument(stdout, rec.stdout)
		return exitOK
	}
	fmt.Fprintf(stdout, "== %s: %s (plugin %s)\n", label, conf.Name, p.Path)
	render(stdout)
	return exitOK
}

// confLabel names a drop-in relative to the conf dir: "tty.d/generic.conf".
func confLabel(o *options, conf *invoke.Conf) string {
	if rel, err := filepath.Rel(o.confDir, conf.Path); err == nil {
		return rel
	}
	return conf.Path
}

// reportError prints a failed run and returns its exit status.
func reportError(o *options, c *command, label string, rec *recorder, err error, stderr io.Writer) int {
	var e *spec.Error
	if !errors.As(err, &e) {
		fmt.Fprintf(stderr, "cditool: %s: %v\n", label, err)
		if errors.Is(err, spec.ErrMalformed) {
			return exitUsage
		}
		return exitFailure
	}
	if c.name == "del" && e.Code == spec.CodeUnknownRequestID {
		fmt.Fprintf(stderr, "cditool: %s: note: request-id %s is unknown to the plugin; nothing to release\n", label, c.requestID)
		return exitOK
	}
	if o.json {
		writeDocument(stderr, rec.stdout)
	} else {
		fmt.Fprintf(stderr, "cditool: %s: %s failed: %s\n", label, c.name, describe(e))
	}
	return exitPluginError
}

// describe formats an error document: "code 10 (Insufficient resources): details".
func describe(e *spec.Error) string {
	s := fmt.Sprintf("plugin error code %d", e.Code)
	if e.Msg != "" {
		s += " (" + e.Msg + ")"
	}
	if e.Details != "" {
		s += ": " + e.Details
	}
	return s
}

// writeDocument writes a plugin's document unchanged, adding the final
// newline if the plugin left it out, so that documents stay one per line
// group for line-oriented tools.
func writeDocument(w io.Writer, doc []byte) {
	if len(doc) == 0 {
		return
	}
	_, _ = w.Write(doc)
	if doc[len(doc)-1] != '\n' {
		_, _ = io.WriteString(w, "\n")
	}
}

// recorder keeps the stdout of the last run, so that --json prints the
// plugin's document exactly as the plugin wrote it.
type recorder struct {
	exec   invoke.Exec
	stdout []byte
}

func (r *recorder) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*invoke.Output, error) {
	out, err := r.exec.ExecPlugin(ctx, path, stdin, env)
	r.stdout = nil
	if out != nil {
		r.stdout = out.Stdout
	}
	return out, err
}

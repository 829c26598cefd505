package main

import (
	"flag"
	"fmt"
	"io"
)

// Exit statuses, documented in usageText.
const (
	exitOK          = 0
	exitPluginError = 1
	exitUsage       = 2
	exitFailure     = 3
)

const usageText = `Usage: cditool [flags] <command> <type> [args]
       cditool [--path dirs] [--timeout d] conformance <plugin> < drop-in

Runs the CDI plugins configured by the drop-ins <conf-dir>/<type>.d/*.conf
(and *.json) with the plugin binaries found in --path, as the kubelet bridge
does, and prints what they answer.

Commands:
  version <type>                          protocol versions each plugin speaks
  info    <type>                          device counts and the device inventory
  add     <type> <request-id> <request>   allocate, e.g. "add tty pod1 tty:2";
                                          --numa 0,1 and --devices id,... are optional
  del     <type> <request-id>             release everything request-id holds
  list    <type>                          current allocations
  gc      <type> <valid-id,...> | --all   release every allocation whose request-id
                                          is not in the list
  conformance <plugin> < drop-in          check a plugin against SPEC.md's rules

version, info, list and gc run every drop-in of the type in file name order, or
only the one --conf names. add and del change state, so they run exactly one
drop-in: with more than one of the type, --conf must name it. --conf takes a
drop-in's file name with or without its extension, or its "name" member.

gc with no list would release every allocation of the type; that happens only
with --all, never by forgetting the argument.

conformance runs one plugin binary, a path or a name found in --path, with
the drop-in on stdin (which the plugin should accept), through every rule of
SPEC.md that a caller can check from outside: version negotiation, each
error code a call can provoke, idempotent ADD, DEL that never fails,
all-or-nothing ADD, LIST and GC, parallel ADDs, one JSON document on
stdout. It prints a row per rule, PASS, FAIL or SKIP with the SPEC.md
section, and under a FAIL what was seen, under a SKIP what the plugin lacks.
What it does to the drop-in: where it has args.stateDir, each rule gets a
fresh temporary directory in its place, removed at the end, so the host's
state is never touched. A drop-in without args.stateDir is passed as it is
and the rules then work in the plugin's own state: they allocate and
release under request-ids of their own, name every other allocation valid
in each GC, and DEL what they allocated; run it where nothing else calls
the plugin meanwhile. Some rules send altered copies of the drop-in on
purpose (another cdiVersion or type, a field missing, data after it).
Exit status: 0 no rule failed, 1 a rule failed, 2 usage error or a drop-in
that is not a valid configuration, 3 the plugin binary was not found.

Output: readable tables on stdout. With --json, each plugin's JSON document
exactly as the plugin printed it, one per drop-in run (del prints none); a
plugin's error document then goes to stderr unchanged. Plugin logs, errors and
notes go to stderr.

Exit status:
  0  success; also del of a request-id the plugin does not know (error code 5):
     there is nothing to release, as the protocol's DEL semantics say, and a
     note goes to stderr
  1  a plugin reported an error (its code, msg and details go to stderr)
  2  usage error: bad flags or arguments, an invalid request, no drop-in of the
     type or of the --conf name, a drop-in that does not load
  3  a plugin could not be run or misbehaved: binary not found, not executable,
     timed out, killed, bad output, or no protocol version in common
When several drop-ins run, the status is the highest of theirs.

Flags (they may also follow the command; "--" ends them):
`

// printUsage writes the full help to w.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usageText)
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

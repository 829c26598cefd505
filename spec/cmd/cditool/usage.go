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

version, info, list and gc run every drop-in of the type in file name order, or
only the one --conf names. add and del change state, so they run exactly one
drop-in: with more than one of the type, --conf must name it. --conf takes a
drop-in's file name with or without its extension, or its "name" member.

gc with no list would release every allocation of the type; that happens only
with --all, never by forgetting the argument.

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

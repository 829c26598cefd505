// Package conformance checks a CDI exec plugin against SPEC.md from the
// outside, the only way a caller knows a plugin: it runs the binary as a
// process, many times, with the protocol's variables and a drop-in on
// stdin, and judges what the plugin prints and how it exits. It needs no
// source, no knowledge of the plugin's state file and no devices beyond
// those the drop-in finds.
//
// Each rule is a small function in the table Rules returns, together with
// the SPEC.md section it comes from. Run runs them all, in table order, and
// reports PASS, FAIL with what was seen, or SKIP with what the plugin lacks
// for the rule (protocol 0.1.0, a free device, a second resource-spec).
// cditool's "conformance" command is a front for Run.
//
// What is done to the drop-in: when it has an args.stateDir, each rule
// runs with a fresh temporary directory of its own in its place, so that
// no rule sees another's allocations and the host's state is never
// touched; the directories are removed at the end. A drop-in without
// args.stateDir is passed as it is, because a plugin need not know that
// argument: the rules then share the plugin's own state. They use
// request-ids of their own, count the allocations they find as taken,
// name them as valid in every GC, and DEL what they allocate. Some rules
// also send deliberately broken variants of the drop-in (another
// cdiVersion or type, a missing field, trailing data, an args member no
// plugin knows), which the plugin must refuse.
//
// A black-box caller cannot provoke every rule, so these are not checked:
// error codes 13 (state) and 14 (internal), where and how the state is
// stored, crash atomicity, the boot id, and that no process outlives the
// plugin.
package conformance

// Package doctest checks the examples of the documents the protocol comes
// from against the real plugins. Every example command of SPEC.md's
// appendix is run, in order, against the built binaries on the
// testdata/root fixture, and must print the document and exit with the
// status the appendix shows; every example of the 2017 CDI draft must get
// the draft's error code and exit status, and its output exactly wherever
// spec/DRAFT.md does not say otherwise; and the worked example of
// plugins/WRITING.md is built from the text and must pass every rule of
// package conformance. A change to a plugin's output that the documents do
// not follow, or to the engine that the example no longer compiles
// against, fails here.
//
// README.md's and bridge/README.md's shell commands, their fenced sh
// blocks wherever they stand, are held to the tools they run: make targets, the flags and commands of
// cditool and cdi-bridge against their --help, each cdi-bridge command
// line parsed by the real binary as a fresh machine would (no NODE_NAME),
// plugins and installed drop-ins by name; and a block that starts with
// dir=$(mktemp -d) runs as written, writing nothing outside that
// directory.
package doctest

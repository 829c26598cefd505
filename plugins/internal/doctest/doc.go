// Package doctest checks the examples in SPEC.md's appendix against the
// real plugins: every example command is run, in order, against the
// built binaries on the testdata/root fixture, and must print the
// document and exit with the status the appendix shows. A change to a
// plugin's output that the specification does not follow fails here.
package doctest

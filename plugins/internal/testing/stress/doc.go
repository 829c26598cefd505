// Package stress holds the tests that hammer a real plugin binary the way
// a busy node does: many processes allocating and releasing at once, and
// processes killed at random instants in the middle of a write. They check
// the promises of SPEC.md's concurrency section from the outside, through
// the state LIST reports and the results ADD returns.
package stress

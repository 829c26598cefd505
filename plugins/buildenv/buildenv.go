// Package buildenv says how the plugin binaries are built, for the Go
// programs that build them as `make build` does: the image builder
// (bridge/deploy/image) and the benchmarks (plugins/bench, bridge/bench).
// The Makefile says the same in its own words; a test holds the two
// together.
package buildenv

// GOEXPERIMENT is the toolchain experiment setting of a plugin build.
//
// nogreenteagc: the garbage collector Go 1.25 brought in and Go 1.26 made
// the default keeps each small-object span's mark bits inside the span,
// at its end. A plugin is a process of a few milliseconds that never runs
// a collection (GODEBUG=gctrace=1 prints nothing for any command), yet it
// pays for those bits: every span it allocates from has its last page
// written as the span is set up, one more fresh page to fault in per
// span. Without it an ADD+DEL faults in some 45 pages fewer (of about
// 550), which the plugins' bench shows as time. Only the plugins are
// built so: cdi-bridge and the tools run long and collect, and keep the
// default. Go 1.26's notes expect the opt-out to go away in Go 1.27; the
// toolchain refuses an unknown experiment, so moving to that release
// means removing this setting, which then costs the plugins those pages.
const GOEXPERIMENT = "nogreenteagc"

// Env returns the environment variables a plugin build sets, to append
// to os.Environ(): static (no C library) and GOEXPERIMENT.
func Env() []string {
	return []string{"CGO_ENABLED=0", "GOEXPERIMENT=" + GOEXPERIMENT}
}

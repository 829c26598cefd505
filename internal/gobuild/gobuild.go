// Package gobuild is the one definition of how this module's binaries are
// built, for the Go programs that build them: the image builder
// (bridge/deploy/image), the binaries the tests exec (plugins/exectest,
// and the node tests in bridge/e2e) and the benchmarks (plugins/bench,
// bridge/bench). `make build`, and so `make install`, builds with the same
// flags in make's words; plugins/exectest's TestBuildIsShipped builds a
// plugin both ways and compares what the go tool stamped into each, so
// that what is tested and measured is what ships.
package gobuild

import (
	"context"
	"os"
	"os/exec"
)

// Env returns the environment a build adds to os.Environ(): no cgo, so
// that a binary is static and needs nothing of the host's C library.
func Env() []string {
	return []string{"CGO_ENABLED=0"}
}

// Flags returns the flags of go build, before -o and the packages:
// -trimpath, so that a binary names no directory of the machine it was
// built on and two checkouts of one commit build the same bytes;
// -ldflags=-s, no symbol table (a panic still prints its stack: the
// runtime keeps its own tables); -buildvcs=auto, the commit a binary was
// built from stamped into it (a plugin's VERSION, a tool's --version),
// whatever GOFLAGS says.
func Flags() []string {
	return []string{"-trimpath", "-ldflags=-s", "-buildvcs=auto"}
}

// Command returns the go build of pkgs into out (a file, or a directory
// ending in a slash for several packages), run in dir (the working
// directory when empty), with Env added to the environment. Its caller
// may add to cmd.Env (GOOS and GOARCH, to cross-compile) and set its
// output before running it.
func Command(ctx context.Context, dir, out string, pkgs ...string) *exec.Cmd {
	args := append(append([]string{"build"}, Flags()...), "-o", out)
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), Env()...)
	return cmd
}

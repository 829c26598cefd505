// Command image builds the bridge's container image without a container
// engine: static binaries (cdi-bridge, cditool and every plugin) and the
// default drop-ins, layered onto an empty base with go-containerregistry
// and written as an image tarball that `docker load`, `podman load` and
// `ctr images import` accept.
//
//	go run ./bridge/deploy/image -o bin/cdi-bridge-image.tar -tag example.com/cdi-bridge:v0.1.0
//
// The image is reproducible: the same sources give the same digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
)

func main() {
	o := options{}
	flag.StringVar(&o.out, "o", "bin/cdi-bridge-image.tar", "the image tarball to write")
	flag.StringVar(&o.tag, "tag", "cdi-bridge:dev", "the image's name and tag in the tarball")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "target architecture (GOARCH); the OS is linux")
	flag.StringVar(&o.repo, "repo", ".", "the repository root")
	flag.Parse()
	digest, err := build(o, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s\n", o.out, o.tag, digest)
}

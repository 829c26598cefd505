// Command image builds the bridge's container image without a container
// engine: the binaries (cdi-bridge, cditool, cdi-install and every
// plugin), built as `make build` builds them (internal/gobuild), and the
// default drop-ins, layered onto an empty base with
// go-containerregistry, for every architecture asked (linux/amd64 and
// linux/arm64 by default), under one OCI image index. It writes an OCI
// image layout as a tarball, which `ctr images import` (and so `kind
// load image-archive`), `podman load` and `docker load` (25 and later)
// accept. The index is named twice: by -tag and by the same repository
// tagged with the build's version (what cdi-bridge --version prints,
// with any character a tag cannot hold as "-").
//
//	go run ./bridge/deploy/image -o bin/cdi-bridge-image.tar -tag example.com/cdi-bridge:v0.1.0
//
// The image is reproducible: the same sources give the same digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	o := options{}
	var arches string
	flag.StringVar(&o.out, "o", "bin/cdi-bridge-image.tar", "the OCI image layout tarball to write")
	flag.StringVar(&o.tag, "tag", "cdi-bridge:dev", "a name of the image; it is also named <repository>:<build version>")
	flag.StringVar(&arches, "arch", "amd64,arm64", "target architectures (GOARCH), separated by commas or spaces; the OS is linux")
	flag.StringVar(&o.repo, "repo", ".", "the repository root")
	flag.Parse()
	o.arches = strings.FieldsFunc(arches, func(r rune) bool { return r == ',' || r == ' ' })
	b, err := build(o, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s\n", o.out, b.Index, strings.Join(b.Names, " "))
}

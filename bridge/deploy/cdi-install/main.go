// Command cdi-install is the init step of the bridge's DaemonSet: it
// copies the plugin binaries and the default drop-ins that the image
// carries onto the host, where the bridge, cditool and any runtime on the
// node find them. The image is static binaries on an empty base, with no
// shell and no cp, so this is what a shell script would otherwise do:
//
//	cdi-install --plugins-from=/opt/cdi/bin --plugins-to=/host/opt/cdi/bin \
//	    --drop-ins-from=/usr/share/cdi/conf.d --drop-ins-to=/host/etc/cdi
//
// Plugins are the image's: each is replaced when it differs, by a rename,
// so that a runtime never runs a half-written binary and a plugin that is
// running at that moment is not written into. Drop-ins are the operator's
// configuration: a default is installed only where no file of its name
// exists, and only once. cdi-install records, in a dot-file in the
// drop-in directory, every default it installed or found present, and
// never brings back one the operator has since removed. A default that an
// earlier release installed and this one withdrew (withdrawn.go) is
// removed where it is still byte for byte what a release installed; one
// the operator edited stays, and the log says what it offers.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	in := installer{log: os.Stdout}
	flag.StringVar(&in.pluginsFrom, "plugins-from", "/opt/cdi/bin", "the image's plugin binaries")
	flag.StringVar(&in.pluginsTo, "plugins-to", "/host/opt/cdi/bin", "where the host's plugin binaries go")
	flag.StringVar(&in.dropInsFrom, "drop-ins-from", "/usr/share/cdi/conf.d", "the image's default drop-ins, <type>.d/<name>.conf")
	flag.StringVar(&in.dropInsTo, "drop-ins-to", "/host/etc/cdi", "the host's drop-in directory")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cdi-install: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := in.run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-install:", err)
		os.Exit(1)
	}
}

// Command generic is the CDI plugin for plain device nodes chosen by path
// globs: USB serial adapters, cameras, sound cards, anything the kernel
// exposes under /dev that needs no setup beyond handing over the node.
//
// Args, besides the engine's common ones (root, stateDir, capacity, cdiKind):
//
//	groups  list of {
//	    "name":        resource-subtype, 1-15 letters or digits; "" (at most one group) serves the bare type
//	    "paths":       absolute host path globs, e.g. ["/dev/ttyUSB*", "/dev/ttyACM*"]
//	    "perDevice":   "glob" (default): every match is one device; "all": all matches together are one device
//	    "permissions": cgroup access, a combination of r, w, m (default "rw")
//	}
//
// A group named "serial" in a configuration of type "dev" serves the
// resource-spec "dev-serial". A node belongs to the first group that
// matches it, so a catch-all group can follow specific ones; directories
// never match. Device ids are the group name and the path below /dev
// ("serial-ttyUSB0", "snd-snd_timer"), or the group name (else the type)
// for a bundled group. A device is healthy while its nodes exist. Its NUMA
// node is its device's, found through the node's device number
// (/sys/dev/char/188:0), so a link such as /dev/serial/by-id/... has one
// too; where the node is no device node (a test tree's plain file), the
// sysfs class entry named like the node (/sys/class/tty/ttyUSB0) is used.
package main

import (
	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/skel"
)

func main() { skel.Main(engine.Plugin(family())) }

// Command generic-tty is the CDI plugin for virtual terminals: it hands out
// /dev/ttyN nodes above the ones the system keeps for itself
// (args.num_system_reserved, as in the CDI draft).
package main

import (
	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/skel"
)

func main() { skel.Main(engine.Plugin(family())) }

// Command cdi-bridge exposes the node's CDI plugins to the kubelet: one
// Configuration-level device plugin per pool of devices (a drop-in's
// resource-spec) and one Instance-level device plugin per device, with
// every slot claimed in an Instance store first; or, for the pools of
// --dra-pools, through DRA (bridge/drafront). `cdi-bridge --help` lists
// the flags; the defaults match a real node. This package holds the flags
// and the wiring: discovery runs here and each discovery's pools are
// handed to the two front ends (frontEnds).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-bridge:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

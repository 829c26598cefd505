// Command cditool runs CDI plugins by hand, the way the kubelet bridge runs
// them: it reads the drop-ins of a resource-type from /etc/cdi/<type>.d,
// runs each one's plugin from /opt/cdi/bin and prints the result. It is the
// counterpart of CNI's cnitool; run "cditool --help" for its usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// An interrupt cancels the run, which kills the plugin's process group.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	status := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(status)
}

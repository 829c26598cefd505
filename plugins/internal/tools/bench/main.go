package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	var o options
	flag.IntVar(&o.n, "n", 200, "timed round trips per subject, after a warm-up")
	flag.DurationVar(&o.concurrent, "concurrent", 3*time.Second, "how long the 64 processes contend on one state file")
	flag.StringVar(&o.hostLocal, "host-local", "", "version of github.com/containernetworking/plugins for host-local (default: newest on the module proxy)")
	flag.Parse()
	if o.n < 1 {
		fmt.Fprintln(os.Stderr, "bench: -n must be at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

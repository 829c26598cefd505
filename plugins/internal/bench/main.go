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
	n := flag.Int("n", 200, "round trips per measurement")
	conc := flag.Duration("concurrent", 3*time.Second, "how long the 64 processes run")
	hostLocal := flag.String("host-local", "v1.9.0", "version of github.com/containernetworking/plugins to install host-local from")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *conc, *hostLocal); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

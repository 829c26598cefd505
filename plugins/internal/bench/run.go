package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// row is one line of the round-trip table.
type row struct {
	name      string
	p50, p90  time.Duration
	size      float64
	cluster   bool
	isFloor   bool
	hostLocal bool
}

func run(ctx context.Context, n int, conc time.Duration, hlVersion string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "cdi-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	progress("building the plugins and the floor")
	if err := build(ctx, root, tmp); err != nil {
		return err
	}
	rows, err := measureAll(ctx, root, tmp, n, hlVersion)
	if err != nil {
		return err
	}
	printTable(os.Stdout, rows, n)
	progress("64 processes doing ADD/DEL on one state file for %v", conc)
	conf, err := dropIn(root, "conf.d/tty.d/generic.conf", filepath.Join(tmp, "contend"))
	if err != nil {
		return err
	}
	conf = withReserved(conf, 28)
	c, err := contend(ctx, filepath.Join(tmp, "generic-tty"), conf, conc)
	if err != nil {
		return err
	}
	printContention(os.Stdout, c)
	if c.doubles > 0 {
		return fmt.Errorf("%d units handed out twice", c.doubles)
	}
	return nil
}

func measureAll(ctx context.Context, root, tmp string, n int, hlVersion string) ([]row, error) {
	floorBin := filepath.Join(tmp, "floor")
	progress("floor: %d round trips of two execs", n)
	d, err := timeRounds(ctx, n, floorTrip(floorBin))
	if err != nil {
		return nil, err
	}
	rows := []row{{name: "floor (trivial Go binary)", p50: percentile(d, 50), p90: percentile(d, 90), size: sizeMiB(floorBin), isFloor: true}}
	if r, err := measureHostLocal(ctx, tmp, n, hlVersion); err != nil {
		progress("host-local unavailable, its column stays empty: %v", err)
	} else {
		rows = append(rows, r)
	}
	for _, p := range pluginCases() {
		bin := filepath.Join(tmp, p.name)
		conf, err := dropIn(root, p.conf, filepath.Join(tmp, "state-"+p.name))
		if err != nil {
			return nil, err
		}
		progress("%s: %d ADD+DEL of %s", p.name, n, p.request)
		d, err := timeRounds(ctx, n, pluginTrip(bin, conf, p.request))
		if err != nil {
			return nil, err
		}
		cluster, err := linksCluster(bin)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row{name: p.name, p50: percentile(d, 50), p90: percentile(d, 90), size: sizeMiB(bin), cluster: cluster})
	}
	return rows, nil
}

func measureHostLocal(ctx context.Context, tmp string, n int, version string) (row, error) {
	progress("installing CNI host-local %s from the module proxy", version)
	bin, err := installHostLocal(ctx, filepath.Join(tmp, "cni"), version)
	if err != nil {
		return row{}, err
	}
	progress("host-local: %d ADD+DEL", n)
	d, err := timeRounds(ctx, n, hostLocalTrip(bin, filepath.Join(tmp, "host-local-data")))
	if err != nil {
		return row{}, err
	}
	return row{name: "CNI host-local " + version, p50: percentile(d, 50), p90: percentile(d, 90), size: sizeMiB(bin), hostLocal: true}, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

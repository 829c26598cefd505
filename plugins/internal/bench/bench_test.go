package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkRoundTrip is the table's first part for `go test -bench`: the
// floor and each plugin's ADD+DEL, in one run, so that their ns/op can be
// compared directly (host-local needs the module proxy and stays in
// `make bench`).
func BenchmarkRoundTrip(b *testing.B) {
	root, err := moduleRoot()
	if err != nil {
		b.Fatal(err)
	}
	tmp := b.TempDir()
	if err := build(context.Background(), root, tmp); err != nil {
		b.Fatal(err)
	}
	b.Run("floor", func(b *testing.B) { benchTrip(b, floorTrip(filepath.Join(tmp, "floor"))) })
	for _, p := range pluginCases() {
		conf, err := dropIn(root, p.conf, filepath.Join(tmp, "state-"+p.name))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p.name, func(b *testing.B) { benchTrip(b, pluginTrip(filepath.Join(tmp, p.name), conf, p.request)) })
	}
}

func benchTrip(b *testing.B, rt roundTrip) {
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if err := rt(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRoundTripsWork runs each round trip once, so that `go test` keeps
// the bench's plugin calls and host-local-free paths from rotting.
func TestRoundTripsWork(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := build(context.Background(), root, tmp); err != nil {
		t.Fatal(err)
	}
	for _, p := range pluginCases() {
		conf, err := dropIn(root, p.conf, filepath.Join(tmp, "state-"+p.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := pluginTrip(filepath.Join(tmp, p.name), conf, p.request)(context.Background(), 0); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}
	c, err := contend(context.Background(), filepath.Join(tmp, "generic-tty"), withReserved(mustDropIn(t, root, tmp), 28), 300*time.Millisecond)
	if err != nil || c.doubles != 0 {
		t.Errorf("contend: %+v, %v", c, err)
	}
}

func mustDropIn(t *testing.T, root, tmp string) []byte {
	conf, err := dropIn(root, "conf.d/tty.d/generic.conf", filepath.Join(tmp, "contend"))
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

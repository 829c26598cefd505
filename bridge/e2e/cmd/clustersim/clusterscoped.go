package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// scopedResult is the scoped phase: a node serving only a local pool of
// scopedDevices, in a namespace of others more Instances of other pools.
type scopedResult struct {
	others int
	// heap is what the node's store added to this process's heap;
	// listed the Instances it lists, events those its informers heard
	// while the others were written again.
	heap           int64
	listed, events int
	took           time.Duration
}

// scopedDevices is the local pool's size.
const scopedDevices = 8

// scoped writes o.others Instances of other pools (16 pools, from 16
// stores at once), then starts a store for one more node, as cdi-bridge
// starts it, which observes a local pool of its own; it measures the heap
// that store adds and the events it hears while every other Instance is
// written once more.
func (s *sim) scoped(ctx context.Context) error {
	if s.o.others == 0 {
		return nil
	}
	s.progress("scoped: writing %d Instances of 16 other pools", s.o.others)
	r := scopedResult{others: s.o.others}
	writers, err := s.writeOthers(ctx, s.o.others, 1)
	if err != nil {
		return err
	}
	// The writers' informers take the echoes of their writes meanwhile.
	time.Sleep(2 * time.Second)
	before := heapInuse()
	start := time.Now()
	n, err := startSimNode(ctx, s.env.Config, s.ns, "node-local")
	if err != nil {
		return err
	}
	defer n.stop()
	var local []instance.Instance
	for i := range scopedDevices {
		id := fmt.Sprintf("tty%d", i)
		local = append(local, instance.Instance{Name: instance.Name("local", id, n.name, false), Config: "local", DeviceID: id, Capacity: 1})
	}
	if err := n.store.Observe(ctx, n.name, "local", local); err != nil {
		return err
	}
	r.took = time.Since(start)
	r.heap = heapInuse() - before
	all, err := n.store.List(ctx)
	if err != nil {
		return err
	}
	r.listed = len(all)
	heard := n.store.Stats().Events
	s.progress("scoped: writing the %d other Instances again", s.o.others)
	if err := s.observeOthers(ctx, writers, s.o.others, 2); err != nil {
		return err
	}
	r.events = n.store.Stats().Events - heard
	s.res.scoped = r
	return nil
}

func heapInuse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// writeOthers starts 16 stores, each serving a pool of its own, and has
// each observe its share of n Instances, of capacity capacity; it returns
// the stores, to write the same again.
func (s *sim) writeOthers(ctx context.Context, n, capacity int) ([]*kube.Store, error) {
	writers := make([]*kube.Store, 16)
	for i := range writers {
		st, err := kube.StartConfig(ctx, s.env.Config, s.ns, kube.ServedPools)
		if err != nil {
			return nil, err
		}
		writers[i] = st
	}
	return writers, s.observeOthers(ctx, writers, n, capacity)
}

// observeOthers has writer i observe pool other-i's share of n Instances,
// at capacity: a change of capacity writes every one of them again.
func (s *sim) observeOthers(ctx context.Context, writers []*kube.Store, n, capacity int) error {
	errs := make([]error, len(writers))
	var wg sync.WaitGroup
	for i, w := range writers {
		wg.Go(func() {
			pool := fmt.Sprintf("other-%02d", i)
			var seen []instance.Instance
			for j := i; j < n; j += len(writers) {
				id := fmt.Sprintf("dev%05d", j)
				seen = append(seen, instance.Instance{Name: instance.Name(pool, id, "", true), Config: pool, DeviceID: id, Shared: true, Capacity: capacity})
			}
			errs[i] = w.Observe(ctx, fmt.Sprintf("writer-%02d", i), pool, seen)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/internal/handover"
)

// openNodeLock opens --node-lock and takes it if no other bridge of the
// node holds it; else it logs the holder and waits for it in the
// background until ctx ends (awaitNodeLock), fail told if the wait
// fails. nil without --node-lock: this bridge is the node's only one.
// The caller releases it (handover.Lock.Release) once the node's slice
// controller has stopped.
func openNodeLock(ctx context.Context, o *options, log *slog.Logger, fail func(error)) (*handover.Lock, error) {
	if o.nodeLock == "" {
		return nil, nil
	}
	host, _ := os.Hostname()
	l, err := handover.Open(o.nodeLock, handover.Record{DRAPools: slices.Collect(maps.Keys(drafront.ParsePools(o.draPools))),
		PodUID: o.podUID, Host: host})
	if err != nil {
		return nil, fmt.Errorf("--node-lock: %w", err)
	}
	held, err := l.TryAcquire()
	if err != nil && !held {
		return nil, fmt.Errorf("--node-lock: %w", err)
	}
	go watchNodeLock(ctx, l, fail)
	if held {
		logHeld(log, l, err, 0)
		return l, nil
	}
	logWaiting(log, l)
	go awaitNodeLock(ctx, l, log, fail, time.Now())
	return l, nil
}

// nodeLockWatch is how often the holder checks that the file it holds
// locked is still the node lock's.
const nodeLockWatch = time.Second

// watchNodeLock, once this bridge holds the node lock, tells fail if its
// file is removed or replaced (handover.Lock.Watch): another bridge may
// then hold the path's new file, and two would write the node's slices.
// The bridge stops, and its restart waits for the lock anew.
func watchNodeLock(ctx context.Context, l *handover.Lock, fail func(error)) {
	if err := l.Watch(ctx, nodeLockWatch); err != nil {
		fail(fmt.Errorf("--node-lock: %w", err))
	}
}

// awaitNodeLock waits for the node lock, held by the other bridge of a
// rolling update, and logs when it is had. A wait that fails otherwise
// than by ctx's end (the lock's file swapped for a link or a FIFO) is
// fail's: the bridge stops, and its restart says why.
func awaitNodeLock(ctx context.Context, l *handover.Lock, log *slog.Logger, fail func(error), since time.Time) {
	err := l.Acquire(ctx)
	select {
	case <-l.Held():
		logHeld(log, l, err, time.Since(since))
	default:
		if ctx.Err() == nil && !errors.Is(err, handover.ErrReleased) {
			fail(fmt.Errorf("--node-lock: %w", err))
		}
	}
}

// logHeld says that this bridge holds the node lock, waited for for
// waited; recErr is its record's failure, if any.
func logHeld(log *slog.Logger, l *handover.Lock, recErr error, waited time.Duration) {
	if recErr != nil {
		log.Warn("holding the node lock, its record not written: a bridge beside this one splits the pools by its own --dra-pools", "path", l.Path(), "error", recErr)
	}
	if waited == 0 {
		log.Info("holding the node lock: this bridge writes the node's ResourceSlices", "path", l.Path())
		return
	}
	log.Info("took over the node from the bridge that held its lock: this bridge writes the node's ResourceSlices, its own --dra-pools split the pools",
		"path", l.Path(), "after", waited.Round(time.Millisecond))
}

// logWaiting says which bridge holds the node lock, and what it serves
// through DRA.
func logWaiting(log *slog.Logger, l *handover.Lock) {
	rec, err := l.Holder()
	if err != nil {
		log.Warn("waiting for the node lock, whose holder's record cannot be read: no ResourceSlice is written until it is had, and the pools are split by this bridge's own --dra-pools",
			"path", l.Path(), "error", err)
		return
	}
	log.Info("waiting for the node lock held by another bridge: no ResourceSlice is written until it is had, and the pools are split between the front ends as the holder splits them",
		"path", l.Path(), "holderPod", rec.PodUID, "holderHost", rec.Host, "holderPID", rec.PID, "holderDRAPools", rec.DRAPools, "holderSince", rec.Since)
}

// stopSlices stops the node's slice controller, if it runs.
func stopSlices(s *dra.NodeSlices) {
	if s != nil {
		s.Stop()
	}
}

// releaseNodeLock lets the node lock go, if this bridge holds it, for the
// other bridge of the node to take over.
func releaseNodeLock(l *handover.Lock, log *slog.Logger) {
	if l == nil {
		return
	}
	held := false
	select {
	case <-l.Held():
		held = true
	default:
	}
	if err := l.Release(); err != nil {
		log.Error("releasing the node lock", "path", l.Path(), "error", err)
	} else if held {
		log.Info("released the node lock: the slice controller has stopped", "path", l.Path())
	}
}

package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Run discovers at once, then every period and within poll of any change
// to the drop-in folders, and hands each result to publish. It returns
// when ctx ends.
func (d *Discoverer) Run(ctx context.Context, period, poll time.Duration, publish func([]Pool)) {
	discover := func() {
		pools, err := d.Discover(ctx)
		if err != nil {
			d.log().Error("discovery failed", "error", err)
			return
		}
		publish(pools)
	}
	seen := Fingerprint(d.ConfDir)
	discover()
	full := time.NewTicker(period)
	defer full.Stop()
	check := time.NewTicker(poll)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-full.C:
			discover()
		case <-check.C:
			if now := Fingerprint(d.ConfDir); now != seen {
				d.log().Info("drop-ins changed; discovering again", "dir", d.ConfDir)
				seen = now
				discover()
			}
		}
	}
}

// Fingerprint summarizes the drop-in folders of confDir (names, sizes and
// modification times of everything in <confDir>/*.d), so that a change is
// noticed without a file-watching dependency. Editors that replace a file
// change its time or size; a folder that cannot be read is part of the
// summary too.
func Fingerprint(confDir string) string {
	var b strings.Builder
	dirs, err := filepath.Glob(filepath.Join(confDir, "*.d"))
	if err != nil {
		return err.Error()
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", dir, err)
			continue
		}
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			fmt.Fprintf(&b, "%s/%s %d %d\n", dir, e.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

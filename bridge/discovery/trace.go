package discovery

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/cdiexec/cdi/spec"
)

// This file is how discovery shows what a plugin says about a drop-in
// beyond its devices: its stderr, the devices it skipped, and an INFO
// that failed.

// MaxStderrLogged bounds what one debug record holds of a plugin run's
// stderr; the rest is counted, not shown. A plugin notes each device it
// skips in a line, and a node of thousands of odd names would otherwise
// make records of tens of kilobytes.
const MaxStderrLogged = 4 << 10

// stderrLog turns a drop-in's plugin runs' stderr into debug records.
// invoke.Plugin writes each run's stderr to it in one Write, after runs
// that succeeded or answered with an error document (the others' errors
// quote it already).
type stderrLog struct {
	log    *slog.Logger
	dropIn string
}

func (w stderrLog) Write(p []byte) (int, error) {
	if !w.log.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	text := p[:min(len(p), MaxStderrLogged)]
	attrs := []any{"dropIn", w.dropIn, "stderr", strings.ToValidUTF8(strings.TrimRight(string(text), "\n"), "\uFFFD")}
	if more := len(p) - len(text); more > 0 {
		attrs = append(attrs, "truncatedBytes", more)
	}
	w.log.Debug("plugin stderr", attrs...)
	return len(p), nil
}

// infoFailed is the skip of a drop-in whose INFO failed: the plugin
// refused its configuration (a misspelt args member is code 15), or could
// not discover. Its devices, if it had any, are kept unhealthy, so it is
// not served, and /readyz and cdi_bridge_dropins_skipped say so as of
// any other drop-in that does not load.
func infoFailed(path string, err error) []Skip {
	return []Skip{{DropIn: path, Reason: "INFO failed: " + err.Error()}}
}

// skippedDevices is what an INFO's skipped_devices counts, as the bridge
// reports it: the positive counts of well-formed reasons, at most
// spec.MaxSkipReasons of them (the first in order), so that a plugin
// cannot make unbounded metric series; nil when none.
func skippedDevices(counts map[string]int) map[string]int {
	var out map[string]int
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		if n := counts[reason]; n > 0 && spec.CheckSkipReason(reason) == nil && len(out) < spec.MaxSkipReasons {
			if out == nil {
				out = map[string]int{}
			}
			out[reason] = n
		}
	}
	return out
}

// noteSkippedDevices logs, at info, a drop-in whose plugin skips other
// devices than at its last INFO: once per change, not at every INFO.
func (d *Discoverer) noteSkippedDevices(path string, before, now map[string]int) {
	if maps.Equal(before, now) {
		return
	}
	total := 0
	for _, n := range now {
		total += n
	}
	d.log().Info("devices the plugin skips changed; it says which and why on stderr (debug)",
		"dropIn", path, "skipped", total, "byReason", now)
}

// SkippedDevices returns, by drop-in file, the devices its plugin skipped
// at its last INFO, by reason (SPEC.md's skipped_devices); drop-ins that
// skip none are left out. It is safe to call from any goroutine.
func (d *Discoverer) SkippedDevices() map[string]map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]map[string]int, len(d.skippedDevices))
	for path, counts := range d.skippedDevices {
		out[path] = maps.Clone(counts)
	}
	return out
}

// skippedByDropIn collects the skipped devices of every drop-in's last
// INFO.
func skippedByDropIn(results map[string]dropInResult) map[string]map[string]int {
	out := map[string]map[string]int{}
	for path, r := range results {
		if len(r.skippedDevices) > 0 {
			out[path] = r.skippedDevices
		}
	}
	return out
}

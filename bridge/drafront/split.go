package drafront

import (
	"strings"

	"github.com/cdiexec/cdi/bridge/discovery"
)

// ParsePools is a comma-separated list of pools (--dra-pools) as a set;
// empty is none.
func ParsePools(s string) map[string]bool {
	out := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out[p] = true
		}
	}
	return out
}

// Split divides pools between the device plugins and DRA. A listed pool
// goes to DRA with every other pool of its drop-in: the pools of a
// drop-in share the plugin's state, and the device plugins' reclaim runs
// GC on that state with only the slots they know, which would release
// the DRA front end's allocations.
func Split(pools []discovery.Pool, listed map[string]bool) (devicePlugins, viaDRA []discovery.Pool) {
	dropIns := map[string]bool{}
	for _, p := range pools {
		if listed[p.Name] {
			dropIns[p.Conf.Path] = true
		}
	}
	for _, p := range pools {
		if dropIns[p.Conf.Path] {
			viaDRA = append(viaDRA, p)
		} else {
			devicePlugins = append(devicePlugins, p)
		}
	}
	return devicePlugins, viaDRA
}

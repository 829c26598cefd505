package dradevices

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/cdiexec/cdi/bridge/discovery"
)

// maxDeviceName is the longest DRA device name: a DNS label.
const maxDeviceName = 63

// DeviceName is inventory id as a DRA device name, which must be a DNS
// label (lower-case letters, digits and '-', at most 63 characters) while
// an id may hold upper case, '.', ':' and '_' and be 128 long. An id that
// is a label already is its own name; any other is lower-cased, its other
// characters turned into '-', cut to fit, and given a hash of the whole
// id, so that ids differing only in what was changed ("0000:01:00.0" and
// "0000-01-00-0") never share a name.
func DeviceName(id string) string {
	name := discovery.LabelChars(id)
	if name == id && len(id) <= maxDeviceName && !strings.HasSuffix(id, "-") {
		return id
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	name = strings.Trim(name, "-")
	if len(name) > maxDeviceName-len(suffix) {
		name = strings.TrimRight(name[:maxDeviceName-len(suffix)], "-")
	}
	if name == "" {
		return "d" + suffix
	}
	return name + suffix
}

// PoolName is the DRA pool of the bridge's pool on node: the bridge's
// pool names ("gpu-drm") are the same on every node, and a DRA pool name
// must be unique among the driver's pools in the cluster.
func PoolName(node, pool string) string { return node + "/" + pool }

package spec

import (
	"slices"
	"strings"
)

// DefaultPermissions is a device node's cgroup access when its result
// names none.
const DefaultPermissions = "rw"

// WithDefaults returns n with its defaults filled in: the container path
// is the host path, and access is DefaultPermissions.
func (n DeviceNode) WithDefaults() DeviceNode {
	if n.ContainerPath == "" {
		n.ContainerPath = n.HostPath
	}
	if n.Permissions == "" {
		n.Permissions = DefaultPermissions
	}
	return n
}

// JoinValues adds src to dst, the rule by which the env and annotations of
// several devices add up (SPEC.md, ADD): a key that several devices set
// gets their distinct values joined by commas in allocation order, the
// convention device plugins use for lists such as visible-device
// variables.
func JoinValues(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]string, len(src))
	}
	for k, v := range src {
		switch old, ok := dst[k]; {
		case !ok:
			dst[k] = v
		case !slices.Contains(strings.Split(old, ","), v):
			dst[k] = old + "," + v
		}
	}
	return dst
}

// AppendMounts adds the mounts of src whose container path dst does not
// hold yet: of two mounts on one container path, the first is kept.
func AppendMounts(dst, src []Mount) []Mount {
	for _, m := range src {
		if !slices.ContainsFunc(dst, func(x Mount) bool { return x.ContainerPath == m.ContainerPath }) {
			dst = append(dst, m)
		}
	}
	return dst
}

package instance

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Instance is one device as the cluster sees it.
//
// The JSON names are lowerCamel, as in every document of the project (the
// local store's file); encoding/json matches names without regard to
// case, so a file written with the Go names before still reads.
type Instance struct {
	// Name is Name(Config, DeviceID, node, Shared).
	Name string `json:"name"`
	// Config is the pool the device belongs to (discovery.Pool.Name).
	Config   string `json:"config"`
	DeviceID string `json:"deviceId"`
	Shared   bool   `json:"shared"`
	// Nodes are the nodes that currently see the device, sorted.
	Nodes    []string `json:"nodes"`
	Capacity int      `json:"capacity"`
	// Usage maps every slot id to its usage: "" free, "<node>" held by
	// that node's Instance-level plugin, "C:<vdev>:<node>" held by that
	// node's Configuration-level plugin as virtual device vdev.
	Usage      map[string]string `json:"usage"`
	Properties map[string]string `json:"properties,omitempty"`
	// Version is opaque: the store's revision of the record.
	Version string `json:"version,omitempty"`
}

// maxName keeps "<name>-<slot>" within the 63 characters the kubelet
// allows a device id (and so within a CDI request-id's 64), since slots
// stay below 1024, the protocol's capacity limit.
const maxName = 58

// Name is "<config>-<hash>": hash is 8 hex digits of SHA-256 of the device
// id, and of the node name too when the device is not shared, so that two
// nodes' local devices with the same id (tty13 on every node) are distinct
// Instances while a shared device is one. config is shortened if needed.
func Name(config, deviceID, node string, shared bool) string {
	key := deviceID
	if !shared {
		key += "\x00" + node
	}
	sum := sha256.Sum256([]byte(key))
	suffix := "-" + hex.EncodeToString(sum[:])[:8]
	config = strings.TrimRight(config[:min(len(config), maxName-len(suffix))], "-")
	return config + suffix
}

// SlotID is "<instance>-<i>".
func SlotID(instance string, i int) string { return instance + "-" + strconv.Itoa(i) }

// Kind says who holds a slot.
type Kind int

const (
	Free          Kind = iota
	InstanceLevel      // "<node>"
	ConfigLevel        // "C:<vdev>:<node>"
)

// Usage is a parsed usage value.
type Usage struct {
	Kind Kind
	VDev string // ConfigLevel only
	Node string
}

// ErrBadUsage is wrapped by ParseUsage's errors.
var ErrBadUsage = errors.New("malformed slot usage")

// InstanceLevelUsage is the usage value of an Instance-level claim by node.
func InstanceLevelUsage(node string) string { return node }

// ConfigurationLevelUsage is the usage value of a Configuration-level
// claim by node as virtual device vdev.
func ConfigurationLevelUsage(vdev, node string) string { return "C:" + vdev + ":" + node }

// ParseUsage parses a usage value. Node names cannot contain ':', so a
// value with one is a Configuration-level claim or malformed.
func ParseUsage(v string) (Usage, error) {
	if v == "" {
		return Usage{Kind: Free}, nil
	}
	rest, cl := strings.CutPrefix(v, "C:")
	if !cl {
		if strings.Contains(v, ":") {
			return Usage{}, fmt.Errorf("%w: %q", ErrBadUsage, v)
		}
		return Usage{Kind: InstanceLevel, Node: v}, nil
	}
	vdev, node, ok := strings.Cut(rest, ":")
	if !ok || vdev == "" || node == "" || strings.Contains(node, ":") {
		return Usage{}, fmt.Errorf("%w: %q", ErrBadUsage, v)
	}
	return Usage{Kind: ConfigLevel, VDev: vdev, Node: node}, nil
}

// Slots returns the instance's slot ids in index order.
func (in *Instance) Slots() []string {
	out := make([]string, in.Capacity)
	for i := range out {
		out[i] = SlotID(in.Name, i)
	}
	return out
}

// FreeSlots counts the slots of the instance that are free.
func (in *Instance) FreeSlots() int {
	n := 0
	for _, s := range in.Slots() {
		if in.Usage[s] == "" {
			n++
		}
	}
	return n
}

// Sees reports whether node is among the nodes that see the device.
func (in *Instance) Sees(node string) bool {
	for _, n := range in.Nodes {
		if n == node {
			return true
		}
	}
	return false
}

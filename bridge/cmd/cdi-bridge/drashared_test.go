package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"testing"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// cameras is a pool of the endpoint plugin's shared cameras, and a
// device of the node's own, of one drop-in.
func cameras(devs ...spec.DeviceInfo) discovery.Pool {
	return discovery.Pool{Name: "camera-endpoint", Resource: "camera",
		Conf: &invoke.Conf{Path: "/etc/cdi/camera.d/endpoint.conf"}, Devices: devs}
}

// The store learns the healthy shared devices of the DRA pools a node
// sees, and nothing of its own devices; a pool gone, or with no camera
// left, takes the node out of its cameras' nodes.
func TestObserveShared(t *testing.T) {
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	f := &draFrontEnd{node: "n1", store: store, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	gate := spec.DeviceInfo{ID: "gate", Resource: "camera", Shared: true, Healthy: true, Capacity: 2}
	dock := spec.DeviceInfo{ID: "dock", Resource: "camera", Shared: true, Healthy: false, Capacity: 2}
	own := spec.DeviceInfo{ID: "usb0", Resource: "camera", Healthy: true, Capacity: 1}
	ttys := discovery.Pool{Name: "tty-generic", Resource: "tty", Conf: &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf"},
		Devices: []spec.DeviceInfo{{ID: "tty1", Resource: "tty", Healthy: true, Capacity: 1}}}
	for _, tc := range []struct {
		name  string
		pools []discovery.Pool
		want  string // the nodes of each Instance, by device id
	}{
		{"the healthy cameras", []discovery.Pool{cameras(gate, dock, own), ttys}, "[gate:[n1]]"},
		{"a camera healthy again", []discovery.Pool{cameras(gate, healthy(dock), own), ttys}, "[dock:[n1] gate:[n1]]"},
		// The local store deletes an Instance no node sees, where the
		// Kubernetes store leaves that to the leader's prune.
		{"no healthy camera left", []discovery.Pool{cameras(dock, own), ttys}, "[]"},
		{"cameras back", []discovery.Pool{cameras(gate), ttys}, "[gate:[n1]]"},
		{"the pool gone", []discovery.Pool{ttys}, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.observeShared(ctx, tc.pools)
			all, err := store.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, in := range all {
				if !in.Shared || in.Config != "camera-endpoint" {
					t.Errorf("Instance %+v: only the shared cameras are recorded", in)
				}
				got = append(got, fmt.Sprintf("%s:%v", in.DeviceID, in.Nodes))
			}
			sort.Strings(got)
			if fmt.Sprint(got) != tc.want {
				t.Errorf("Instances %v, want %s", got, tc.want)
			}
		})
	}
}

func healthy(d spec.DeviceInfo) spec.DeviceInfo {
	d.Healthy = true
	return d
}

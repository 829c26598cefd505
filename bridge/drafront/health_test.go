package drafront

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra/dratest"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// Each discovery handed over tells the kubelet its devices' health at
// once, without waiting for the publishing goroutine, and counts the
// devices it publishes and taints.
func TestSetPoolsReportsHealthAndCounts(t *testing.T) {
	ckpt, err := dradevices.LoadCheckpoint(filepath.Join(t.TempDir(), "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	pub := &dratest.Publisher{}
	f := &FrontEnd{node: "n1", driver: "cdi.test", publisher: pub, log: slog.New(slog.DiscardHandler),
		preparer: &dradevices.Preparer{Driver: "cdi.test", Node: "n1", Checkpoint: ckpt},
		wake:     make(chan struct{}, 1), poolsChanged: make(chan struct{}, 1)}
	ttys := discovery.Pool{Name: "tty-generic", Resource: "tty", Conf: &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf"},
		Devices:  []spec.DeviceInfo{{ID: "tty1", Resource: "tty", Healthy: true, Capacity: 1}, {ID: "tty2", Resource: "tty", Capacity: 1}},
		Vanished: map[string]bool{"tty2": true}}
	f.SetPools([]discovery.Pool{ttys})
	var got []string
	for _, h := range pub.Health() {
		got = append(got, fmt.Sprintf("%s/%s:%s", h.Pool, h.Name, h.Health))
	}
	if fmt.Sprint(got) != "[n1/tty-generic/tty1:Healthy n1/tty-generic/tty2:Unhealthy]" {
		t.Errorf("health reported %v", got)
	}
	if c := f.Published(); len(c) != 1 || c[0].Pool != "tty-generic" || c[0].Published != 2 || c[0].Tainted != 1 {
		t.Errorf("published %+v, want tty-generic's two devices, one tainted", c)
	}
}

package drafront

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	kwait "k8s.io/apimachinery/pkg/util/wait"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra/dratest"
	"github.com/cdiexec/cdi/bridge/dradevices"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// Each discovery handed over tells the kubelet its devices' health at
// once, without waiting for the publishing goroutine, once the kubelet
// plugin has started; the publishing goroutine counts the devices it
// publishes and taints.
func TestSetPoolsReportsHealthAndCounts(t *testing.T) {
	ckpt, err := dradevices.LoadCheckpoint(filepath.Join(t.TempDir(), "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := &FrontEnd{node: "n1", driver: "cdi.test", log: slog.New(slog.DiscardHandler),
		store:    local.New(filepath.Join(t.TempDir(), "instances.json")),
		preparer: &dradevices.Preparer{Driver: "cdi.test", Node: "n1", Checkpoint: ckpt},
		wake:     make(chan struct{}, 1), poolsChanged: make(chan struct{}, 1)}
	ttys := discovery.Pool{Name: "tty-generic", Resource: "tty", Conf: &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf"},
		Devices:  []spec.DeviceInfo{{ID: "tty1", Resource: "tty", Healthy: true, Capacity: 1}, {ID: "tty2", Resource: "tty", Capacity: 1}},
		Vanished: map[string]bool{"tty2": true}}
	f.SetPools([]discovery.Pool{ttys}) // before the kubelet plugin: nothing to tell
	pub := &dratest.Publisher{}
	f.mu.Lock()
	f.publisher = pub
	f.mu.Unlock()
	f.SetPools([]discovery.Pool{ttys})
	var got []string
	for _, h := range pub.Health() {
		got = append(got, fmt.Sprintf("%s/%s:%s", h.Pool, h.Name, h.Health))
	}
	if fmt.Sprint(got) != "[n1/tty-generic/tty1:Healthy n1/tty-generic/tty2:Unhealthy]" {
		t.Errorf("health reported %v", got)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go f.publish(ctx)
	err = kwait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait, true, func(context.Context) (bool, error) {
		return len(pub.Published()) > 0, nil
	})
	if c := f.Published(); err != nil || len(c) != 1 || c[0].Pool != "tty-generic" || c[0].Published != 2 || c[0].Tainted != 1 {
		t.Errorf("published %+v (%v), want tty-generic's two devices, one tainted", c, err)
	}
}

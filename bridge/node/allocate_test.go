package node

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// pluginDir holds the real generic-tty and endpoint plugins, built once.
var pluginDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &pluginDir, "github.com/cdiexec/cdi/plugins/generic-tty", "github.com/cdiexec/cdi/plugins/endpoint")
}

// setup returns an allocator on a fresh store holding Instances for
// tty13, tty14 and tty99 (capacity 1, node n1), and the tty plugin. The
// fixture has no tty99: it stands for a device gone since discovery,
// whose ADD fails.
func setup(t *testing.T) (*allocator, *invoke.Plugin, map[string]instance.Instance) {
	root := exectest.FixtureRoot(t)
	conf, _ := json.Marshal(map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": 12}})
	plugin := &invoke.Plugin{Path: filepath.Join(pluginDir, "generic-tty"), Config: conf}
	store := local.New(filepath.Join(t.TempDir(), "instances.json"))
	ins := map[string]instance.Instance{}
	var seen []instance.Instance
	for _, dev := range []string{"tty13", "tty14", "tty99"} {
		in := instance.Instance{Name: instance.Name("tty-t", dev, "n1", false), Config: "tty-t", DeviceID: dev, Capacity: 1}
		ins[dev] = in
		seen = append(seen, in)
	}
	if err := store.Observe(context.Background(), "n1", "tty-t", seen); err != nil {
		t.Fatal(err)
	}
	return &allocator{Store: store, Prefix: "cdi.example.com"}, plugin, ins
}

func testGrant(p *invoke.Plugin, in instance.Instance, dev, vdev string) grant {
	value := instance.InstanceLevelUsage("n1")
	if vdev != "" {
		value = instance.ConfigurationLevelUsage(vdev, "n1")
	}
	return grant{Claim: instance.Claim{Instance: in.Name, Slot: instance.SlotID(in.Name, 0), Value: value}, VDev: vdev, Plugin: p, Resource: "tty", DeviceID: dev}
}

func usage(t *testing.T, a *allocator, in instance.Instance) string {
	all, err := a.Store.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range all {
		if x.Name == in.Name {
			return x.Usage[instance.SlotID(in.Name, 0)]
		}
	}
	t.Fatalf("no instance %s", in.Name)
	return ""
}

func allocations(t *testing.T, p *invoke.Plugin) map[string]bool {
	l, err := p.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, a := range l.Allocations {
		out[a.RequestID] = true
	}
	return out
}

func TestAllocateClaimsThenAdds(t *testing.T) {
	a, p, ins := setup(t)
	g := testGrant(p, ins["tty13"], "tty13", "")
	resp, err := a.Allocate(context.Background(), [][]grant{{g}})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	slot := g.Claim.Slot
	// No spec file names the device (g.CDI is nil): the plugin's own CDI
	// name is not passed on, the node goes as a DeviceSpec.
	if len(c.Devices) != 1 || c.Devices[0].HostPath != "/dev/tty13" || c.Devices[0].Permissions != "rw" ||
		c.Annotations["cdi.example.com/slot-"+slot] != slot || len(c.CdiDevices) != 0 {
		t.Fatalf("response %v", c)
	}
	if u := usage(t, a, ins["tty13"]); u != "n1" {
		t.Errorf("store usage %q, want n1", u)
	}
	if !allocations(t, p)[slot] {
		t.Errorf("the plugin holds no allocation for %s", slot)
	}
}

// A device that a spec file names goes by its CDI name alone: its node is
// not a DeviceSpec too, so the runtime does not inject it twice.
func TestAllocateNamesSpecDevicesByCDI(t *testing.T) {
	a, p, ins := setup(t)
	g := testGrant(p, ins["tty13"], "tty13", "")
	g.CDI = &cdiDevice{Name: "cdi.example.com/tty-t=tty13", Nodes: []spec.DeviceNode{{HostPath: "/dev/tty13"}}}
	resp, err := a.Allocate(context.Background(), [][]grant{{g}})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	if len(c.Devices) != 0 || len(c.CdiDevices) != 1 || c.CdiDevices[0].Name != g.CDI.Name {
		t.Fatalf("response %v, want the CDI name alone", c)
	}
}

// A failing ADD in the second container undoes the first container's
// grant, in the store and on the plugin, but never a slot held before.
func TestAllocateIsAllOrNothing(t *testing.T) {
	a, p, ins := setup(t)
	held := testGrant(p, ins["tty13"], "tty13", "3")
	if _, err := a.Allocate(context.Background(), [][]grant{{held}}); err != nil {
		t.Fatal(err)
	}
	held.Held = true
	fresh := testGrant(p, ins["tty14"], "tty14", "4")
	gone := testGrant(p, ins["tty99"], "tty99", "5")
	_, err := a.Allocate(context.Background(), [][]grant{{held}, {fresh, gone}})
	var e *spec.Error
	if !errors.As(err, &e) || e.Code != spec.CodeUnknownDevice {
		t.Fatalf("Allocate = %v, want the plugin's code 12", err)
	}
	for _, dev := range []string{"tty14", "tty99"} {
		if u := usage(t, a, ins[dev]); u != "" {
			t.Errorf("%s's slot still %q after the failed call", dev, u)
		}
	}
	if u := usage(t, a, ins["tty13"]); u != instance.ConfigurationLevelUsage("3", "n1") {
		t.Errorf("the slot held before the call became %q", u)
	}
	if got := allocations(t, p); !got[held.Claim.Slot] || got[fresh.Claim.Slot] || len(got) != 1 {
		t.Errorf("plugin allocations after the failed call: %v", got)
	}
}

// An ADD that commits and then fails (here: the plugin's work is done,
// then the call times out) is undone on the plugin too: the slot is
// neither in the store nor in the plugin's state.
func TestAllocateUndoesAnADDThatTimedOutAfterCommitting(t *testing.T) {
	a, p, ins := setup(t)
	slow := filepath.Join(t.TempDir(), "slow-generic-tty")
	// VERSION, which the caller runs first, answers at once.
	script := "#!/bin/sh\n" + p.Path + " || exit\n[ \"$CDI_COMMAND\" = ADD ] && exec sleep 30\nexit 0\n"
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	late := &invoke.Plugin{Path: slow, Config: p.Config}
	a.Timeout = 2 * time.Second
	g := testGrant(late, ins["tty13"], "tty13", "")
	if _, err := a.Allocate(context.Background(), [][]grant{{g}}); err == nil {
		t.Fatal("Allocate succeeded though its ADD timed out")
	} else if !errors.Is(err, invoke.ErrTimeout) {
		t.Fatalf("Allocate = %v, want the ADD's timeout", err)
	}
	if u := usage(t, a, ins["tty13"]); u != "" {
		t.Errorf("store usage %q after the failed call", u)
	}
	if got := allocations(t, p); len(got) != 0 {
		t.Errorf("the plugin still holds %v after the failed call", got)
	}
}

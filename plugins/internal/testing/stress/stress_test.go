package stress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// plugin is the built generic-tty binary.
var plugin string

func TestMain(m *testing.M) {
	exectest.Main(m, "github.com/cdiexec/cdi/plugins/generic-tty", &plugin)
}

// conf serves tty29 to tty44 of the fixture: 16 terminals, few enough
// that 64 processes contend for them all the time.
func conf(t *testing.T, capacity int) []byte {
	return exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reserved": 28, "capacity": capacity,
	})
}

func env(cmd string, kv ...string) map[string]string {
	return exectest.Env(append([]string{"CDI_VERSION", "0.1.0", "CDI_COMMAND", cmd}, kv...)...)
}

// unit is one usage slot of one device: what must never have two holders.
type unit struct {
	device string
	slot   int
}

func units(r spec.AddResult) []unit {
	out := make([]unit, len(r.Units))
	for i, u := range r.Units {
		out[i] = unit{u.Device, u.Slot}
	}
	return out
}

// list runs LIST and fails the test unless it succeeds with a consistent
// state. It calls t.Fatal, so only the test's own goroutine may use it.
func list(t testing.TB, conf []byte, capacity int) map[string]spec.Allocation {
	t.Helper()
	got, err := listE(conf, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// listE runs LIST and checks what any single state must satisfy: no unit
// held by two request-ids, no slot outside the capacity, no device with
// more units than its capacity. It is safe from any goroutine.
func listE(conf []byte, capacity int) (map[string]spec.Allocation, error) {
	r, err := exectest.RunE(context.Background(), plugin, env("LIST"), conf)
	if err != nil {
		return nil, err
	}
	if r.Status != 0 {
		// Code 13 here means a state file that no longer parses.
		return nil, fmt.Errorf("LIST: status %d, code %d: %s %s", r.Status, r.Code(), r.Stdout, r.Stderr)
	}
	var lr spec.ListResult
	if err := json.Unmarshal(r.Stdout, &lr); err != nil {
		return nil, fmt.Errorf("LIST: %w", err)
	}
	var errs []error
	holder := map[unit]string{}
	perDevice := map[string]int{}
	out := map[string]spec.Allocation{}
	for _, a := range lr.Allocations {
		for _, u := range units(a.Result) {
			if other, taken := holder[u]; taken {
				errs = append(errs, fmt.Errorf("LIST: %v held by %s and %s", u, other, a.RequestID))
			}
			if u.slot < 0 || u.slot >= capacity {
				errs = append(errs, fmt.Errorf("LIST: %v outside capacity %d", u, capacity))
			}
			holder[u] = a.RequestID
			perDevice[u.device]++
		}
		if _, dup := out[a.RequestID]; dup {
			errs = append(errs, fmt.Errorf("LIST: request-id %s listed twice", a.RequestID))
		}
		out[a.RequestID] = a
	}
	for d, n := range perDevice {
		if n > capacity {
			errs = append(errs, fmt.Errorf("LIST: %s has %d units, capacity %d", d, n, capacity))
		}
	}
	return out, errors.Join(errs...)
}

// complete checks that an allocation holds what its request asked for and
// a whole result: one unit, node and CDI device per terminal, in step.
func complete(a spec.Allocation) error {
	req, err := spec.ParseRequest(a.Request)
	if err != nil {
		return fmt.Errorf("%s: request %q: %w", a.RequestID, a.Request, err)
	}
	want := 0
	for _, it := range req {
		want += it.Amount
	}
	r := a.Result
	if len(r.Units) != want || len(r.Devices) != want || len(r.DeviceNodes) != want || len(r.CDIDevices) != want {
		return fmt.Errorf("%s asked %q: %d units, %d devices, %d nodes, %d CDI devices",
			a.RequestID, a.Request, len(r.Units), len(r.Devices), len(r.DeviceNodes), len(r.CDIDevices))
	}
	for i, u := range r.Units {
		if r.Devices[i] != "/dev/"+u.Device || r.CDIDevices[i] != "cdi.local/tty="+u.Device {
			return fmt.Errorf("%s: unit %v does not match device %s / %s", a.RequestID, u, r.Devices[i], r.CDIDevices[i])
		}
	}
	return nil
}

// results keeps only the ADD results of a LIST, for comparing with ADD's.
func results(m map[string]spec.Allocation) map[string]spec.AddResult {
	out := make(map[string]spec.AddResult, len(m))
	for id, a := range m {
		out[id] = a.Result
	}
	return out
}

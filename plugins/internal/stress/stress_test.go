package stress

import (
	"context"
	"testing"

	"github.com/cdiexec/cdi/plugins/internal/exectest"
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

// list runs LIST and fails the test unless the state is consistent: no
// unit held by two request-ids, no slot beyond capacity.
func list(t testing.TB, conf []byte, capacity int) map[string]spec.AddResult {
	r, err := exectest.RunE(context.Background(), plugin, env("LIST"), conf)
	if err != nil || r.Status != 0 {
		t.Fatalf("LIST: %v, status %d, %s %s", err, r.Status, r.Stdout, r.Stderr)
	}
	var lr spec.ListResult
	r.Decode(t, &lr)
	holder := map[unit]string{}
	out := map[string]spec.AddResult{}
	for _, a := range lr.Allocations {
		for _, u := range units(a.Result) {
			if other, taken := holder[u]; taken {
				t.Errorf("LIST: %v held by %s and %s", u, other, a.RequestID)
			}
			if u.slot >= capacity {
				t.Errorf("LIST: %v beyond capacity %d", u, capacity)
			}
			holder[u] = a.RequestID
		}
		out[a.RequestID] = a.Result
	}
	return out
}

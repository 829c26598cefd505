package dradevices

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// adminClaim is claim with every result for admin access.
func adminClaim(uid string, results ...result) *resourceapi.ResourceClaim {
	c := claim(types.UID(uid), results...)
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].AdminAccess = ptr.To(true)
	}
	return c
}

// A result for admin access (a monitoring pod's, say) gives the container
// the device without an ADD: it neither takes a slot nor needs a free
// one, and its Unprepare DELs nothing.
func TestPrepareAdminAccess(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	if _, err := r.p.Prepare(ctx, claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
		t.Fatal(err)
	}
	t.Run("on a device in use", func(t *testing.T) {
		devs, err := r.p.Prepare(ctx, adminClaim("admin1", result{"cdi.local", "n/tty-generic", r.devices[0]}))
		if err != nil {
			t.Fatal(err)
		}
		s, ok := r.spec(t, "admin1")
		if !ok || len(s.Devices) != 1 || len(s.Devices[0].ContainerEdits.DeviceNodes) != 1 ||
			s.Devices[0].ContainerEdits.DeviceNodes[0].HostPath != "/dev/tty41" || len(devs) != 1 || len(devs[0].CDIIDs) != 1 {
			t.Fatalf("devices %+v, spec %+v; want tty41's node named", devs, s)
		}
		if got := r.allocations(t); fmt.Sprint(got) != "[u1-0]" {
			t.Errorf("plugin allocations %v, want u1's alone", got)
		}
		if err := r.p.Unprepare(ctx, "admin1"); err != nil {
			t.Fatal(err)
		}
		if got := r.allocations(t); fmt.Sprint(got) != "[u1-0]" {
			t.Errorf("plugin allocations after the admin claim's Unprepare %v, want u1's", got)
		}
	})
	t.Run("on a free device", func(t *testing.T) {
		if _, err := r.p.Prepare(ctx, adminClaim("admin2", result{"cdi.local", "n/tty-generic", r.devices[1]})); err != nil {
			t.Fatal(err)
		}
		if _, err := r.p.Prepare(ctx, claim("u2", result{"cdi.local", "n/tty-generic", r.devices[1]})); err != nil {
			t.Errorf("a claim of the device an admin claim has: %v", err)
		}
	})
}

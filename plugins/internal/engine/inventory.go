package engine

import (
	"fmt"
	"path/filepath"

	"github.com/cdiexec/cdi/spec"
)

// checkInventory validates what a family discovered and fills in each
// device's default capacity. A failure here is a bug in the family.
func checkInventory(cfg *spec.Config, inv *Inventory, defaultCapacity int) error {
	served := map[spec.ResourceSpec]bool{}
	for _, rs := range inv.Resources {
		if rs.Type != cfg.Type {
			return fmt.Errorf("resource-spec %q does not start with the configured type %q", rs, cfg.Type)
		}
		served[rs] = true
	}
	seen := map[string]bool{}
	for i := range inv.Devices {
		d := &inv.Devices[i]
		if err := CheckDeviceID(d.ID); err != nil {
			return err
		}
		if seen[d.ID] {
			return fmt.Errorf("device id %q is discovered twice", d.ID)
		}
		seen[d.ID] = true
		if !served[d.Resource] {
			return fmt.Errorf("device %q has resource-spec %q, which the configuration does not serve", d.ID, d.Resource)
		}
		for _, n := range d.Nodes {
			if !filepath.IsAbs(n.HostPath) {
				return fmt.Errorf("device %q has a relative node path %q", d.ID, n.HostPath)
			}
		}
		if d.Capacity == 0 {
			d.Capacity = defaultCapacity
		}
	}
	return nil
}

// usage maps each device id to the slots allocations hold on it.
type usage map[string]map[int]bool

func (c *call) usage() usage {
	u := usage{}
	for _, rec := range c.state.Allocations {
		for _, unit := range rec.Result.Units {
			u.take(unit.Device, unit.Slot)
		}
	}
	return u
}

func (u usage) take(device string, slot int) {
	if u[device] == nil {
		u[device] = map[int]bool{}
	}
	u[device][slot] = true
}

// free counts the slots below capacity that nobody holds. Slots at or
// above capacity (left over after capacity shrank) are never free.
func (u usage) free(d *Device) int {
	n := 0
	for i := 0; i < d.Capacity; i++ {
		if !u[d.ID][i] {
			n++
		}
	}
	return n
}

// lowestFree returns the first free slot of d, or -1.
func (u usage) lowestFree(d *Device) int {
	for i := 0; i < d.Capacity; i++ {
		if !u[d.ID][i] {
			return i
		}
	}
	return -1
}

func (c *call) serves(rs spec.ResourceSpec) bool {
	for _, r := range c.inv.Resources {
		if r == rs {
			return true
		}
	}
	return false
}

func (c *call) device(id string) *Device {
	for i := range c.inv.Devices {
		if c.inv.Devices[i].ID == id {
			return &c.inv.Devices[i]
		}
	}
	return nil
}

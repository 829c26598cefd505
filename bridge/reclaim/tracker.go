package reclaim

import (
	"time"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Slot is one slot this node claims, with the names the kubelet knows it
// by.
type Slot struct {
	Claim instance.Claim
	// Pool is the configuration whose plugin set the slot up.
	Pool string
	// Resource and DeviceID are the kubelet's: <domain>/<instance> and
	// the slot id for an Instance-level claim, <domain>/<pool> and the
	// virtual device for a Configuration-level one.
	Resource, DeviceID string
}

// Claimed lists the slots node claims among instances.
func Claimed(instances []instance.Instance, node, domain string) []Slot {
	var out []Slot
	for _, in := range instances {
		for slot, v := range in.Usage {
			u, err := instance.ParseUsage(v)
			if err != nil || u.Node != node {
				continue
			}
			s := Slot{Claim: instance.Claim{Instance: in.Name, Slot: slot, Value: v}, Pool: in.Config}
			switch u.Kind {
			case instance.InstanceLevel:
				s.Resource, s.DeviceID = domain+"/"+in.Name, slot
			case instance.ConfigLevel:
				s.Resource, s.DeviceID = domain+"/"+in.Config, u.VDev
			default:
				continue
			}
			out = append(out, s)
		}
	}
	return out
}

// Tracker remembers since when each claimed slot has been missing from
// what the kubelet reports. The zero value is not usable: use NewTracker.
type Tracker struct {
	grace   time.Duration
	missing map[instance.Claim]time.Time
}

// NewTracker returns a Tracker that lets a slot go after grace.
func NewTracker(grace time.Duration) *Tracker {
	return &Tracker{grace: grace, missing: map[instance.Claim]time.Time{}}
}

// Due returns the claimed slots that no container has held for at least
// the grace period, as of now. A slot held again is forgotten, and so is
// one no longer claimed.
func (t *Tracker) Due(now time.Time, claimed []Slot, held Held) []Slot {
	var due []Slot
	still := map[instance.Claim]bool{}
	for _, s := range claimed {
		if held[s.Resource][s.DeviceID] {
			continue
		}
		still[s.Claim] = true
		since, ok := t.missing[s.Claim]
		if !ok {
			t.missing[s.Claim] = now
			since = now
		}
		if now.Sub(since) >= t.grace {
			due = append(due, s)
		}
	}
	for c := range t.missing {
		if !still[c] {
			delete(t.missing, c)
		}
	}
	return due
}

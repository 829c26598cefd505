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
// what the kubelet reports, and which pod held it last. The zero value
// is not usable: use NewTracker.
type Tracker struct {
	grace   time.Duration
	missing map[instance.Claim]time.Time
	holder  map[instance.Claim]string
}

// NewTracker returns a Tracker that lets a slot go after grace.
func NewTracker(grace time.Duration) *Tracker {
	return &Tracker{grace: grace, missing: map[instance.Claim]time.Time{}, holder: map[instance.Claim]string{}}
}

// Due returns the claimed slots that no container has held for at least
// the grace period, as of now, and those no container holds whose last
// holder ended (ended says so of a pod, by <namespace>/<name>; nil: of
// none), which wait for no grace: the grace bridges what the kubelet
// does not report for a while (its restart), not a pod known gone. A
// slot held again is forgotten, and so is one no longer claimed.
func (t *Tracker) Due(now time.Time, claimed []Slot, pods *Pods, ended func(pod string) bool) []Slot {
	var due []Slot
	still := map[instance.Claim]bool{}
	for _, s := range claimed {
		still[s.Claim] = true
		if pods.Devices[s.Resource][s.DeviceID] {
			if h := pods.Holders[s.Resource][s.DeviceID]; h != "" {
				t.holder[s.Claim] = h
			}
			delete(t.missing, s.Claim)
			continue
		}
		since, ok := t.missing[s.Claim]
		if !ok {
			t.missing[s.Claim] = now
			since = now
		}
		h, known := t.holder[s.Claim]
		if now.Sub(since) >= t.grace || known && ended != nil && ended(h) {
			due = append(due, s)
		}
	}
	for c := range t.missing {
		if !still[c] {
			delete(t.missing, c)
		}
	}
	for c := range t.holder {
		if !still[c] {
			delete(t.holder, c)
		}
	}
	return due
}

// holders are the pods last seen holding the claimed slots.
func (t *Tracker) holders() []string {
	seen := map[string]bool{}
	var out []string
	for _, pod := range t.holder {
		if !seen[pod] {
			seen[pod] = true
			out = append(out, pod)
		}
	}
	return out
}

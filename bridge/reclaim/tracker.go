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
// what the kubelet reports, which pod held it last, and which slots'
// holders have ended. The zero value is not usable: use NewTracker.
type Tracker struct {
	grace   time.Duration
	missing map[instance.Claim]time.Time
	holder  map[instance.Claim]string
	// ended are the slots, not held, whose last holder has ended: due at
	// the next Due, once.
	ended map[instance.Claim]bool
}

// NewTracker returns a Tracker that lets a slot go after grace.
func NewTracker(grace time.Duration) *Tracker {
	return &Tracker{grace: grace, missing: map[instance.Claim]time.Time{}, holder: map[instance.Claim]string{},
		ended: map[instance.Claim]bool{}}
}

// Due returns the claimed slots that no container has held for at least
// the grace period, as of now, and those no container holds whose last
// holder has ended (holderEnded), which wait for no grace: the grace
// bridges what the kubelet does not report for a while (its restart),
// not a pod known gone. A slot held again is forgotten, and so is one no
// longer claimed, and one released (Released).
func (t *Tracker) Due(now time.Time, claimed []Slot, pods *Pods) []Slot {
	var due []Slot
	still := map[instance.Claim]bool{}
	for _, s := range claimed {
		still[s.Claim] = true
		if pods.Devices[s.Resource][s.DeviceID] {
			if h := pods.Holders[s.Resource][s.DeviceID]; h != "" {
				t.holder[s.Claim] = h
			}
			delete(t.missing, s.Claim)
			delete(t.ended, s.Claim)
			continue
		}
		since, ok := t.missing[s.Claim]
		if !ok {
			t.missing[s.Claim] = now
			since = now
		}
		if now.Sub(since) >= t.grace || t.ended[s.Claim] {
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
			t.forget(c)
		}
	}
	return due
}

// Released forgets the slot of c, released: claimed again under the
// same value (a pod of the same name), it starts anew.
func (t *Tracker) Released(c instance.Claim) { t.forget(c) }

// forget drops all the Tracker knows of c.
func (t *Tracker) forget(c instance.Claim) {
	delete(t.missing, c)
	delete(t.holder, c)
	delete(t.ended, c)
}

// unlistedHolders are the pods last seen holding slots that the kubelet
// no longer lists (running), each once.
func (t *Tracker) unlistedHolders(running map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	for c, pod := range t.holder {
		if !seen[pod] && !running[pod] && !t.ended[c] {
			seen[pod] = true
			out = append(out, pod)
		}
	}
	return out
}

// holderEnded marks the slots pod held last as due at the next Due,
// which releases one only if no container holds it then; it returns how
// many it marked. It is told of a pod the kubelet no longer lists
// (unlistedHolders): a pod of the same name made since, and listed,
// is never told of.
func (t *Tracker) holderEnded(pod string) int {
	n := 0
	for c, h := range t.holder {
		if h == pod {
			t.ended[c] = true
			n++
		}
	}
	return n
}

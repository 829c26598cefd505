package bench

import "sync"

// ledger is the bench's own record of who holds which unit (device/slot),
// kept apart from the plugin's state so that it can catch the plugin
// handing one unit to two live requests.
//
// The scheme, and why it is sound: a request enters the ledger when its
// ADD has returned, and is marked releasing just before its DEL starts,
// because from then on the plugin may free the unit and give it to
// another ADD, which may even return before this DEL does. It leaves the
// ledger only once its DEL has returned. So when an ADD returns a unit:
//
//   - held by nobody, or by a releasing request: legal;
//   - held by a request that is live and not releasing: that request's
//     ADD returned and its DEL had not started, so the plugin still holds
//     the unit for it: a double handout, counted.
//
// A unit keeps every request that holds it, so that a releasing holder's
// DEL returning never hides the live holder that got the unit after it.
// Whichever of two overlapping holders records first, the second sees
// the first live, so a double handout between live holders is never
// missed; one that overlaps only a DEL in progress cannot be told apart
// from a legal reuse from outside the plugin, and is not counted.
type ledger struct {
	mu        sync.Mutex
	holders   map[string]map[string]bool // unit -> request-ids holding it
	isRelease map[string]bool            // request-id -> its DEL has started
	doubles   int
}

func newLedger() *ledger {
	return &ledger{holders: map[string]map[string]bool{}, isRelease: map[string]bool{}}
}

// acquire records that id's ADD returned these units.
func (l *ledger) acquire(id string, units []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range units {
		for other := range l.holders[u] {
			if !l.isRelease[other] {
				l.doubles++
			}
		}
		if l.holders[u] == nil {
			l.holders[u] = map[string]bool{}
		}
		l.holders[u][id] = true
	}
}

// releasing records that id's DEL is about to start.
func (l *ledger) releasing(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.isRelease[id] = true
}

// released records that id's DEL returned successfully.
func (l *ledger) released(id string, units []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range units {
		delete(l.holders[u], id)
		if len(l.holders[u]) == 0 {
			delete(l.holders, u)
		}
	}
	delete(l.isRelease, id)
}

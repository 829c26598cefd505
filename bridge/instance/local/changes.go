package local

import (
	"os"
	"time"
)

// Changes returns a channel that receives after every write, by this
// Store at once and by other processes within PollInterval.
func (s *Store) Changes() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs[ch] = true
	if s.stop == nil {
		s.stop = make(chan struct{})
		go s.poll(s.stop)
	}
	cancel := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.subs[ch] {
			return
		}
		delete(s.subs, ch)
		if len(s.subs) == 0 {
			close(s.stop)
			s.stop = nil
		}
	}
	return ch, cancel
}

func (s *Store) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default: // a signal is pending already; receivers read the latest state
		}
	}
}

// poll watches the file for writes by other processes: every write
// renames a new file into place, so its identity or time changes.
func (s *Store) poll(stop chan struct{}) {
	last, _ := os.Stat(s.path)
	t := time.NewTicker(s.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		fi, _ := os.Stat(s.path)
		if changed(last, fi) {
			s.notify()
		}
		last = fi
	}
}

func changed(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return (a == nil) != (b == nil)
	}
	return !os.SameFile(a, b) || !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size()
}

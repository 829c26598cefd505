package local

import (
	"os"
	"sync"
	"time"
)

// Changes returns a channel that receives after every write, by this
// Store at once and by other processes within PollInterval. The poll
// runs while anyone receives.
func (s *Store) Changes() (<-chan struct{}, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, stop := s.changes.Subscribe()
	if s.stop == nil {
		s.stop = make(chan struct{})
		go s.poll(s.stop)
	}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			stop()
			if s.changes.Len() == 0 && s.stop != nil {
				close(s.stop)
				s.stop = nil
			}
		})
	}
}

// notify signals every receiver; one with a signal pending already reads
// the latest state anyway.
func (s *Store) notify() { s.changes.Notify() }

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

package main

import (
	"errors"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/discovery"
)

// /healthz fails once the store has been stale for longer than the
// limit, and never with the limit off.
func TestHealthStoreStaleLimit(t *testing.T) {
	lost := errors.New("watch lost")
	for _, tc := range []struct {
		name       string
		staleFor   time.Duration // 0: current
		limit      time.Duration
		wantHealth bool
	}{
		{"current", 0, 10 * time.Minute, true},
		{"stale within the limit", 9 * time.Minute, 10 * time.Minute, true},
		{"stale past the limit", 11 * time.Minute, 10 * time.Minute, false},
		{"limit off", time.Hour, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := readiness{disc: &discovery.Discoverer{}, staleLimit: tc.limit, stale: func() (time.Time, error) {
				if tc.staleFor == 0 {
					return time.Time{}, nil
				}
				return time.Now().Add(-tc.staleFor), lost
			}}
			if err := h.health(); (err == nil) != tc.wantHealth {
				t.Errorf("health() = %v, want healthy %v", err, tc.wantHealth)
			}
		})
	}
}

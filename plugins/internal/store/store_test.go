package store

import (
	"slices"
	"testing"
)

func TestReconcileBoot(t *testing.T) {
	tests := []struct {
		name        string
		stored, now string
		wantDropped []string
		wantBoot    string
	}{
		{"same boot", "a", "a", nil, "a"},
		{"reboot", "a", "b", []string{"r1", "r2"}, "b"},
		{"first write", "", "b", nil, "b"},
		{"boot id unknown now", "a", "", nil, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState(tt.stored)
			st.Allocations["r2"] = &Record{Request: "tty=1"}
			st.Allocations["r1"] = &Record{Request: "tty=1"}
			st.ReconcileBoot(tt.now)
			if !slices.Equal(st.Dropped, tt.wantDropped) || st.BootID != tt.wantBoot {
				t.Fatalf("dropped %v, boot %q; want %v, %q", st.Dropped, st.BootID, tt.wantDropped, tt.wantBoot)
			}
			if kept := len(st.Allocations); kept != 2-len(tt.wantDropped) {
				t.Errorf("%d allocations kept", kept)
			}
		})
	}
}

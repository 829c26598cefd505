package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/spec"
)

func TestCheckDeviceID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"0000:00:02.0", true},
		{"tty13", true},
		{"serial-ttyUSB0", true},
		{"a", true},
		{"9", true},
		{"in-input_by-id_usb-Logi_Cam", true},
		{strings.Repeat("a", 128), true},
		{"gpu-", false}, // a device-id of the protocol, not a CDI device name
		{"gpu.", false},
		{"gpu_", false},
		{"gpu:", false},
		{"-gpu", false},
		{"", false},
		{"g/pu", false},
		{"gpü", false},
		{strings.Repeat("a", 129), false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			err := CheckDeviceID(tt.id)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, spec.ErrMalformed)) {
				t.Fatalf("CheckDeviceID(%q) = %v, want ok %v (or ErrMalformed)", tt.id, err, tt.ok)
			}
		})
	}
}

// TestInventoryRefusesNonCDIIDs checks that a family whose device id is no
// CDI device name fails discovery (code 14) instead of putting an invalid
// qualified name in cdiDevices.
func TestInventoryRefusesNonCDIIDs(t *testing.T) {
	r := newRig(t, "")
	r.inv.Devices[0].ID = "gpu0-"
	_, err := r.add(req{id: "a", request: "gpu:1"})
	if spec.CodeOf(err) != spec.CodeInternal || !strings.Contains(err.Error(), "gpu0-") {
		t.Fatalf("ADD with a device id ending in '-': %v, want code 14 naming it", err)
	}
}

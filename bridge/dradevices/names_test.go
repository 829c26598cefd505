package dradevices

import (
	"regexp"
	"strings"
	"testing"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestDeviceName(t *testing.T) {
	long := strings.Repeat("x", 128)
	for _, tc := range []struct {
		id       string
		same     bool // the id is its own name
		distinct string
	}{
		{id: "tty13", same: true},
		{id: "card-0", same: true},
		{id: "0000:01:00.0", distinct: "0000-01-00-0"},
		{id: "USB_serial_A", distinct: "usb-serial-a"},
		{id: long, distinct: long[:127]},
		{id: "a-", distinct: "a"},
		{id: "__", distinct: "_-"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			name := DeviceName(tc.id)
			if !dnsLabel.MatchString(name) || len(name) > 63 {
				t.Fatalf("DeviceName(%q) = %q, not a DNS label", tc.id, name)
			}
			if tc.same && name != tc.id {
				t.Errorf("DeviceName(%q) = %q, want the id itself", tc.id, name)
			}
			if tc.distinct != "" && DeviceName(tc.distinct) == name {
				t.Errorf("DeviceName(%q) and DeviceName(%q) are both %q", tc.id, tc.distinct, name)
			}
			if DeviceName(tc.id) != name {
				t.Errorf("DeviceName(%q) is not stable", tc.id)
			}
		})
	}
}

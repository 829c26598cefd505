package instance

import (
	"errors"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/spec"
)

func TestName(t *testing.T) {
	a := Name("tty-generic", "tty13", "node-a", false)
	if a != Name("tty-generic", "tty13", "node-a", false) || !strings.HasPrefix(a, "tty-generic-") || len(a) != len("tty-generic-")+8 {
		t.Fatalf("Name = %q, not stable or not <config>-<8 hex>", a)
	}
	if a == Name("tty-generic", "tty13", "node-b", false) {
		t.Error("a node-local device has the same name on two nodes")
	}
	if Name("camera-endpoint", "lobby", "node-a", true) != Name("camera-endpoint", "lobby", "node-b", true) {
		t.Error("a shared device has different names on two nodes")
	}
	long := Name(strings.Repeat("x", 80)+"-y", "dev", "n", true)
	if len(long) > maxName {
		t.Errorf("Name = %q, longer than %d", long, maxName)
	}
	// Every slot of the longest name is a valid request-id.
	if err := spec.CheckRequestID(SlotID(long, 1023)); err != nil {
		t.Errorf("slot id of %q: %v", long, err)
	}
}

func TestParseUsage(t *testing.T) {
	tests := []struct {
		in   string
		want Usage
		bad  bool
	}{
		{"", Usage{Kind: Free}, false},
		{"node-a", Usage{Kind: InstanceLevel, Node: "node-a"}, false},
		{"C:0:node-b", Usage{Kind: ConfigLevel, VDev: "0", Node: "node-b"}, false},
		{"C:12:n", Usage{Kind: ConfigLevel, VDev: "12", Node: "n"}, false},
		{"C::n", Usage{}, true},
		{"C:0:", Usage{}, true},
		{"C:0", Usage{}, true},
		{"x:y", Usage{}, true},
		{"C:0:a:b", Usage{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseUsage(tt.in)
			if tt.bad != errors.Is(err, ErrBadUsage) || got != tt.want {
				t.Fatalf("ParseUsage(%q) = %+v, %v", tt.in, got, err)
			}
			if !tt.bad && tt.in != "" {
				round := InstanceLevelUsage(got.Node)
				if got.Kind == ConfigLevel {
					round = ConfigurationLevelUsage(got.VDev, got.Node)
				}
				if round != tt.in {
					t.Errorf("round trip of %q gives %q", tt.in, round)
				}
			}
		})
	}
}

func TestFreeSlots(t *testing.T) {
	in := Instance{Name: "i", Capacity: 3, Usage: map[string]string{"i-0": "n", "i-2": "", "i-9": "n"}}
	if in.FreeSlots() != 2 {
		t.Errorf("FreeSlots = %d, want 2 (slot 1 missing counts as free, slot 9 is beyond capacity)", in.FreeSlots())
	}
}

package dradevices

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/dra"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// The kubelet is told every device's health, by the pool and name
// Prepare gives it, and why an unhealthy one is: vanished or the
// plugin's check; a device whose drop-in's INFO failed is Unknown,
// saying so; and a device a prepared claim holds that no pool lists any
// more is unhealthy, vanished.
func TestHealth(t *testing.T) {
	ckpt, err := LoadCheckpoint(filepath.Join(t.TempDir(), "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	for uid, d := range map[string]PreparedDevice{
		"u1": {Pool: "tty-generic", Device: "tty9", ID: "tty9", RequestID: "u1-0"},   // gone
		"u2": {Pool: "tty-generic", Device: "tty1", ID: "tty1", RequestID: "u2-0"},   // listed
		"u3": {Pool: "tty-hotplug", Device: "tty50", ID: "tty50", RequestID: "u3-0"}, // its pool gone
	} {
		if err := ckpt.Put(types.UID(uid), Claim{Namespace: "ns", Name: uid, Devices: []PreparedDevice{d}}); err != nil {
			t.Fatal(err)
		}
	}
	p := &Preparer{Driver: "cdi.local", Node: "n", Checkpoint: ckpt}
	ttys := discovery.Pool{Name: "tty-generic", Conf: &invoke.Conf{Path: "/etc/cdi/tty.d/generic.conf"},
		Devices:  []spec.DeviceInfo{{ID: "tty1", Healthy: true}, {ID: "tty2"}},
		Vanished: map[string]bool{"tty2": true}}
	cams := discovery.Pool{Name: "camera-endpoint", Conf: &invoke.Conf{Path: "/etc/cdi/camera.d/endpoint.conf"},
		Devices: []spec.DeviceInfo{{ID: "gate", Shared: true}, {ID: "Dock.1"}}}
	failed := discovery.Pool{Name: "gpu-drm", Conf: &invoke.Conf{Path: "/etc/cdi/gpu.d/drm.conf"},
		Devices: []spec.DeviceInfo{{ID: "0000:01:00.0"}}, Err: errors.New("exit status 2: \xff\xfe" + strings.Repeat("x", 2000))}
	checked := time.Unix(1700000000, 0)
	var got []string
	for _, h := range p.Health([]discovery.Pool{ttys, cams, failed}, checked) {
		if !h.Checked.Equal(checked) || len(h.Message) > maxHealthMessage || !utf8.ValidString(h.Message) {
			t.Errorf("%s/%s: checked %v, message of %d bytes, valid UTF-8: %v", h.Pool, h.Name, h.Checked, len(h.Message), utf8.ValidString(h.Message))
		}
		msg, _, _ := strings.Cut(h.Message, ":")
		got = append(got, fmt.Sprintf("%s/%s %s %s", h.Pool, h.Name, h.Health, msg))
	}
	want := []string{
		"n/tty-generic/tty1 Healthy ",
		"n/tty-generic/tty2 Unhealthy vanished",
		"camera-endpoint/gate Unhealthy INFO of /etc/cdi/camera.d/endpoint.conf lists it unhealthy",
		"n/camera-endpoint/" + DeviceName("Dock.1") + " Unhealthy INFO of /etc/cdi/camera.d/endpoint.conf lists it unhealthy",
		"n/gpu-drm/" + DeviceName("0000:01:00.0") + " Unknown INFO of /etc/cdi/gpu.d/drm.conf failed",
		"n/tty-generic/tty9 Unhealthy vanished",
		"n/tty-hotplug/tty50 Unhealthy vanished",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("health:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A message is valid UTF-8, which gRPC requires, and at most
// maxHealthMessage bytes, cut at a character.
func TestHealthMessageClipped(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     func(string) bool
	}{
		{"short", "vanished", func(m string) bool { return m == "vanished" }},
		{"bytes that are no UTF-8", "failed: \xff\xfe!", func(m string) bool { return m == "failed: \uFFFD!" }},
		{"long", strings.Repeat("x", 2000), func(m string) bool {
			return len(m) == maxHealthMessage && strings.HasSuffix(m, "...")
		}},
		{"long, cut in a character", strings.Repeat("é", 1000), func(m string) bool {
			return len(m) <= maxHealthMessage && len(m) >= maxHealthMessage-1 && strings.HasSuffix(m, "é...")
		}},
	} {
		got := clip(dra.DeviceHealth{Message: tc.in}).Message
		if !utf8.ValidString(got) || !tc.want(got) {
			t.Errorf("%s: %q (%d bytes)", tc.name, got, len(got))
		}
	}
}

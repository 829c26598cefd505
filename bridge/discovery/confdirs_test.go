package discovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// TestSeveralConfDirs: ConfDir may list directories, as the Helm chart's
// DaemonSet does (the host's, then a ConfigMap's); every one's drop-ins
// are served, the same pool twice is refused, and a directory that cannot
// be read fails the discovery.
func TestSeveralConfDirs(t *testing.T) {
	args := func(t *testing.T) map[string]any {
		return map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reserved": 40}
	}
	for _, tc := range []struct {
		name       string
		second     func(t *testing.T, dir string) string // returns the ConfDir entry
		want       []string
		wantDirErr bool
	}{
		{"each directory's drop-ins", func(t *testing.T, dir string) string {
			writeConf(t, dir, "tty", "chart", "generic-tty", args(t))
			return dir
		}, []string{"tty-chart(4)", "tty-host(4)"}, false},
		{"one pool in both is refused", func(t *testing.T, dir string) string {
			writeConf(t, dir, "tty", "host", "generic-tty", args(t))
			return dir
		}, nil, false},
		{"an absent directory has none", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "absent")
		}, []string{"tty-host(4)"}, false},
		{"a file is no directory", func(t *testing.T, dir string) string {
			file := filepath.Join(dir, "file")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return file
		}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := t.TempDir()
			writeConf(t, host, "tty", "host", "generic-tty", args(t))
			d := &Discoverer{ConfDir: host + ":" + tc.second(t, t.TempDir()), PluginDirs: []string{pluginDir}}
			pools, err := d.Discover(context.Background())
			var dirErr *confDirError
			if tc.wantDirErr != errors.As(err, &dirErr) || (!tc.wantDirErr && err != nil) {
				t.Fatalf("error %v, want a directory's error: %v", err, tc.wantDirErr)
			}
			if got := names(pools); !slices.Equal(got, tc.want) {
				t.Errorf("pools %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRunNoticesTheSecondConfDir: a drop-in added to a later directory of
// ConfDir is discovered as one in the first is.
func TestRunNoticesTheSecondConfDir(t *testing.T) {
	d, _ := newDiscoverer(t)
	second := t.TempDir()
	d.ConfDir += ":" + second
	got := discoveredAfter(t, d, func() {
		writeConf(t, second, "tty", "chart", "generic-tty",
			map[string]any{"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reserved": 40})
	}, "tty-chart")
	if p := find(got, "tty-chart"); p.Err != nil || len(p.Devices) != 4 {
		t.Fatalf("after adding a drop-in to the second directory: %d devices, error %v", len(p.Devices), p.Err)
	}
}

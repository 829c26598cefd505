package discovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// version010 is the VERSION reply of a plugin of 0.1.0, for fake plugins
// whose results are of 0.1.0.
const version010 = `{"cdiVersion":"0.1.0","supportedVersions":["0.0.1","0.0.2","0.1.0"]}`

// execLog runs plugins as processes, as invoke.ProcessExec does, and
// records each run: its plugin, command and CDI_VERSION.
type execLog struct {
	mu   sync.Mutex
	runs []execRun
}

type execRun struct{ plugin, command, version string }

func (e *execLog) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*invoke.Output, error) {
	r := execRun{plugin: filepath.Base(path), command: command(env)}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, spec.EnvVersion+"="); ok {
			r.version = v
		}
	}
	e.mu.Lock()
	e.runs = append(e.runs, r)
	e.mu.Unlock()
	return invoke.ProcessExec{}.ExecPlugin(ctx, path, stdin, env)
}

// take returns the runs since the last take.
func (e *execLog) take() []execRun {
	e.mu.Lock()
	defer e.mu.Unlock()
	runs := e.runs
	e.runs = nil
	return runs
}

// count returns how many of runs are of plugin's command.
func count(runs []execRun, plugin, command string) int {
	n := 0
	for _, r := range runs {
		if r.plugin == plugin && r.command == command {
			n++
		}
	}
	return n
}

// discoverHealthy runs d and fails unless it serves want pools, each of
// healthy devices, and skips nothing.
func discoverHealthy(t *testing.T, d *Discoverer, want int) []Pool {
	t.Helper()
	pools, err := d.Discover(context.Background())
	if err != nil || len(pools) != want || len(d.Skipped()) != 0 {
		t.Fatalf("pools %v, error %v, skipped %+v; want %d pools and no skip", names(pools), err, d.Skipped(), want)
	}
	for _, p := range pools {
		if p.Err != nil || len(p.Devices) == 0 || !p.Devices[0].Healthy {
			t.Fatalf("pool %s: %+v", p.Name, p)
		}
	}
	return pools
}

// Discovery runs VERSION once per plugin binary, not before every INFO,
// and again for a binary that was replaced or touched on the host; every
// INFO is in the newest version both sides speak.
func TestDiscoveryNegotiatesOncePerBinary(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"generic-tty", "generic"} {
		exectest.Install(t, filepath.Join(pluginDir, name), dir)
	}
	log := &execLog{}
	d, _ := newDiscoverer(t)
	d.PluginDirs, d.Exec = []string{dir}, log
	tests := []struct {
		name     string
		change   func(t *testing.T)
		versions map[string]int // VERSION runs of each plugin
	}{
		{"first", func(*testing.T) {}, map[string]int{"generic-tty": 1, "generic": 1}},
		{"again", func(*testing.T) {}, map[string]int{}},
		{"generic-tty installed anew", func(t *testing.T) { exectest.Install(t, filepath.Join(pluginDir, "generic-tty"), dir) },
			map[string]int{"generic-tty": 1}},
		{"generic touched", func(t *testing.T) {
			later := time.Now().Add(time.Hour)
			if err := os.Chtimes(filepath.Join(dir, "generic"), later, later); err != nil {
				t.Fatal(err)
			}
		}, map[string]int{"generic": 1}},
		{"again after the changes", func(*testing.T) {}, map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.change(t)
			discoverHealthy(t, d, 3)
			runs := log.take()
			for _, plugin := range []string{"generic-tty", "generic"} {
				if got := count(runs, plugin, spec.CmdVersion); got != tt.versions[plugin] {
					t.Errorf("%s: %d VERSION runs, want %d", plugin, got, tt.versions[plugin])
				}
			}
			for _, r := range runs {
				if r.command == spec.CmdInfo && r.version != spec.Current {
					t.Errorf("%s INFO in %q, want %s", r.plugin, r.version, spec.Current)
				}
			}
		})
	}
}

// A plugin of 0.1.0 alone, which refuses 0.2.0 with code 1, is served:
// from the start, and when the plugin that speaks 0.2.0 gives way to one
// of 0.1.0 without its file changing (here the drop-in makes the one test
// plugin play the older one), at once, asked VERSION again, its devices
// never unhealthy.
func TestDiscoveryServesAPluginOf010(t *testing.T) {
	tests := []struct {
		name  string
		modes []string // the drop-in's mode at each discovery
		want  []string // the version of its INFO that succeeded
	}{
		{"from the start", []string{"v010", "v010"}, []string{spec.Version010, spec.Version010}},
		{"after a plugin of 0.2.0", []string{"", "v010"}, []string{spec.Version020, spec.Version010}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			confDir, log := t.TempDir(), &execLog{}
			d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Exec: log}
			for i, mode := range tt.modes {
				writeConf(t, confDir, "tty", "test", "testplugin", map[string]any{"mode": mode})
				pools := discoverHealthy(t, d, 1)
				if pools[0].Name != "tty-test" || len(pools[0].Devices) != 2 {
					t.Fatalf("discovery %d: pools %v, want tty-test with 2 devices", i, names(pools))
				}
				runs := log.take()
				if last := runs[len(runs)-1]; last.command != spec.CmdInfo || last.version != tt.want[i] {
					t.Errorf("discovery %d: the last run was %+v, want INFO in %s", i, last, tt.want[i])
				}
				if i > 0 && tt.modes[i] != tt.modes[i-1] && count(runs, "testplugin", spec.CmdVersion) != 1 {
					t.Errorf("discovery %d: runs %+v, want VERSION asked again after the code 1", i, runs)
				}
			}
		})
	}
}

// A plugin older than 0.1.0 has no device inventory: its drop-in is
// skipped, with a reason that says so, and INFO is not run.
func TestDiscoverySkipsAPluginOlderThan010(t *testing.T) {
	confDir, log := t.TempDir(), &execLog{}
	writeConf(t, confDir, "tty", "old", "testplugin", map[string]any{"mode": "old"})
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Exec: log}
	pools, err := d.Discover(context.Background())
	if err != nil || len(pools) != 0 {
		t.Fatalf("pools %v, error %v; want none", names(pools), err)
	}
	skips := d.Skipped()
	if len(skips) != 1 || !strings.HasSuffix(skips[0].DropIn, "old.conf") ||
		!strings.Contains(skips[0].Reason, "supports 0.0.1, 0.0.2; this caller needs 0.1.0 or newer") {
		t.Fatalf("skipped %+v, want old.conf, as a plugin of 0.0.2", skips)
	}
	if runs := log.take(); count(runs, "testplugin", spec.CmdInfo) != 0 {
		t.Errorf("runs %+v, want no INFO", runs)
	}
}

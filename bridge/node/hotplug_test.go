package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/logtest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// hotplugRig is a node over generic-tty on a fixture root of its own,
// whose dev/ holds empty files standing for terminals, watched with the
// real inotify; the discovery period is the default minute, so that only
// the watch can discover within the tests' bounds.
type hotplugRig struct {
	t      *testing.T
	root   string
	cdiDir string
	n      *Node
	mu     sync.Mutex
	took   []time.Duration // OnDeviceEvent's
}

func startHotplug(t *testing.T, ttys ...int) (*hotplugRig, *kubelettest.Kubelet) {
	return startHotplugIn(t, t.TempDir(), nil, ttys...)
}

// startHotplugIn is startHotplug with the CDI spec files in cdiDir and
// the node's log, if not nil, in log.
func startHotplugIn(t *testing.T, cdiDir string, log *slog.Logger, ttys ...int) (*hotplugRig, *kubelettest.Kubelet) {
	r := &hotplugRig{t: t, root: t.TempDir(), cdiDir: cdiDir}
	if err := os.Mkdir(filepath.Join(r.root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range ttys {
		r.plug(n)
	}
	w, err := discovery.NewInotify()
	if err != nil {
		t.Fatal(err)
	}
	cdi, err := cdispec.Open(r.cdiDir, "cdi.test")
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{"cdiVersion": "0.1.0", "name": "t", "type": "tty", "plugin": "generic-tty",
		"args": map[string]any{"root": r.root, "stateDir": t.TempDir(), "num_system_reserved": 40, "capacity": 2}}
	k, n := startNodeWith(t, "tty.d/generic.conf", doc, func(c *Config, d *discovery.Discoverer) {
		d.Watch, c.CDI = w, cdi
		if log != nil {
			c.Logger = log
		}
		c.OnDeviceEvent = func(d time.Duration) { r.mu.Lock(); r.took = append(r.took, d); r.mu.Unlock() }
	})
	r.n = n
	return r, k
}

func (r *hotplugRig) plug(n int) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.root, "dev", fmt.Sprintf("tty%d", n)), nil, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *hotplugRig) unplug(n int) {
	r.t.Helper()
	if err := os.Remove(filepath.Join(r.root, "dev", fmt.Sprintf("tty%d", n))); err != nil {
		r.t.Fatal(err)
	}
}

// cdiNames is every device name the node's CDI spec files hold.
func (r *hotplugRig) cdiNames() string {
	r.t.Helper()
	files, err := filepath.Glob(filepath.Join(r.cdiDir, cdispec.FilePrefix+"*"))
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, id := range []string{"tty41", "tty42"} {
			if strings.Contains(string(b), `"`+id+`"`) {
				out = append(out, id)
			}
		}
	}
	return strings.Join(out, ",")
}

// usage is the slots of a device's Instance as the store holds them.
func (r *hotplugRig) usage(id string) string {
	r.t.Helper()
	all, err := r.n.cfg.Store.List(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	name := instance.Name("tty-generic", id, "n1", false)
	for _, in := range all {
		if in.Name == name {
			return fmt.Sprintf("%s|%s", in.Usage[instance.SlotID(name, 0)], in.Usage[instance.SlotID(name, 1)])
		}
	}
	return "none"
}

// A terminal plugged in is offered, with its Instance, resource and CDI
// name; unplugged while a container holds it, it is reported unhealthy
// and keeps all three and its slot; back under the same id it is healthy
// with the same slot. One that no container holds goes. Every step is
// timed from the change to the kubelet's list and logged: the bound is
// generous for a loaded machine, far below the minute of the period that
// is all there is without the watch.
func TestNodeHotplug(t *testing.T) {
	r, k := startHotplug(t, 41)
	const cl = "cdi.test/tty-generic"
	name42 := instance.Name("tty-generic", "tty42", "n1", false)
	il42, il41 := "cdi.test/"+name42, "cdi.test/"+instance.Name("tty-generic", "tty41", "n1", false)
	waitList(t, k, cl, "0")
	holdTTY42 := func() {
		if _, err := k.Allocate(context.Background(), il42, []string{name42 + "-0"}); err != nil {
			t.Fatalf("Allocate on tty42: %v", err)
		}
	}
	steps := []struct {
		name      string
		change    func()
		res, want string
		cdi       string // the devices the CDI spec files name
		usage42   string // tty42's two slots in the store
		then      func()
	}{
		{"tty42 plugged", func() { r.plug(42) }, il42, name42 + "-0," + name42 + "-1", "tty41,tty42", "|", holdTTY42},
		{"tty42 unplugged, held", func() { r.unplug(42) }, il42, name42 + "-0!," + name42 + "-1!", "tty41,tty42", "n1|", nil},
		{"tty42 back", func() { r.plug(42) }, il42, name42 + "-0," + name42 + "-1", "tty41,tty42", "n1|", nil},
		{"tty41 unplugged, not held", func() { r.unplug(41) }, il41, "", "tty42", "n1|", nil},
	}
	for _, s := range steps {
		start := time.Now()
		s.change()
		waitList(t, k, s.res, s.want)
		t.Logf("%s: the kubelet had the list after %v", s.name, time.Since(start))
		if got := r.cdiNames(); got != s.cdi {
			t.Errorf("%s: CDI spec files name %q, want %q", s.name, got, s.cdi)
		}
		if got := r.usage("tty42"); got != s.usage42 {
			t.Errorf("%s: tty42's slots %q, want %q", s.name, got, s.usage42)
		}
		if s.then != nil {
			s.then()
		}
	}
	// tty42 has one free slot left: the one placeholder.
	waitList(t, k, cl, "0")
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.took) == 0 {
		t.Error("OnDeviceEvent was never told")
	}
	t.Logf("from a device event to the kubelet's list: %v", r.took)
}

// A spec directory that is full fails every write of the pool's spec
// file, at every discovery a device flapping makes: the failure is
// logged once, not once per discovery, and the writes leave nothing in
// the directory (the CDI library left its temporary file at each: 41
// after 20 flaps). Once there is room again the file is written, and
// that is said once.
func TestFullSpecDirectory(t *testing.T) {
	var log logtest.Buffer
	cdiDir := exectest.FullDisk(t, func(string) {})
	r, k := startHotplugIn(t, cdiDir, log.Logger(), 41)
	name42 := instance.Name("tty-generic", "tty42", "n1", false)
	il42 := "cdi.test/" + name42
	flap := func(times int) {
		for range times {
			r.plug(42)
			waitList(t, k, il42, name42+"-0,"+name42+"-1")
			r.unplug(42)
			waitList(t, k, il42, "")
		}
	}
	flap(5)
	if failed := log.Count("writing CDI spec files"); failed != 1 {
		t.Errorf("%d lines for the full spec directory over 11 discoveries, want 1:\n%s", failed, log.String())
	}
	if got := dirNames(cdiDir); got != "filler" {
		t.Errorf("the full spec directory holds %s, want the filler alone", got)
	}
	if err := os.Remove(filepath.Join(cdiDir, "filler")); err != nil {
		t.Fatal(err)
	}
	flap(1)
	if got, want := dirNames(cdiDir), cdispec.FilePrefix+"cdi.test-tty-generic.json"; got != want {
		t.Errorf("the spec directory with room again holds %s, want %s", got, want)
	}
	if n := log.Count("writing CDI spec files works again"); n != 1 {
		t.Errorf("%d lines saying the spec files are written again, want 1:\n%s", n, log.String())
	}
}

// dirNames is the names in dir, dot-files too, joined by ",".
func dirNames(dir string) string {
	paths, _ := filepath.Glob(filepath.Join(dir, "*"))
	for i, p := range paths {
		paths[i] = filepath.Base(p)
	}
	return strings.Join(paths, ",")
}

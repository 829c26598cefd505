package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

func TestWatchDirs(t *testing.T) {
	node := func(p string) []spec.DeviceNode { return []spec.DeviceNode{{HostPath: p}} }
	tests := []struct {
		name    string
		args    string
		devices []spec.DeviceInfo
		want    watchSet
	}{
		{"no devices yet: root's /dev", `{"root":"/r"}`, nil, watchSet{dev: "/r/dev"}},
		{"default root", `{}`, []spec.DeviceInfo{{ID: "tty13", DeviceNodes: node("/dev/tty13")}}, watchSet{dev: "/dev"}},
		{"subdirectories, once each", `{"root":"/r"}`, []spec.DeviceInfo{
			{ID: "c1", DeviceNodes: []spec.DeviceNode{{HostPath: "/dev/dri/card1"}, {HostPath: "/dev/dri/renderD129"}}},
			{ID: "pcm", DeviceNodes: node("/dev/snd/pcmC0D0p")}, {ID: "c0", DeviceNodes: node("/dev/dri/card0")},
		}, watchSet{dev: "/r/dev", subdirs: []string{"/r/dev/dri", "/r/dev/snd"}}},
		{"network endpoints: nothing", `{}`, []spec.DeviceInfo{{ID: "door"}, {ID: "gate"}}, watchSet{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &invoke.Conf{Path: "x.conf", Config: spec.Config{Args: json.RawMessage(tc.args)}}
			if got := watchDirs(c, tc.devices); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("watchDirs = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// An event concerns the drop-ins that look in its directory: every
// drop-in of a root for <root>/dev, only those with devices there for a
// subdirectory, none for network endpoints.
func TestConcerned(t *testing.T) {
	dw := newDevWatch(newFakeWatcher(), slog.New(slog.DiscardHandler))
	dw.sync(map[string]watchSet{
		"gpu.conf":    {dev: "/a/dev", subdirs: []string{"/a/dev/dri"}},
		"tty.conf":    {dev: "/a/dev"},
		"other.conf":  {dev: "/b/dev"},
		"camera.conf": {},
	})
	tests := []struct {
		path string
		want []string
	}{
		{"/a/dev/ttyUSB0", []string{"gpu.conf", "tty.conf"}},
		{"/a/dev/dri/card1", []string{"gpu.conf"}},
		{"/a/dev/dri", []string{"gpu.conf", "tty.conf"}},
		{"/b/dev/tty3", []string{"other.conf"}},
		{"/c/dev/tty3", nil},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			if got := dw.concerned(tc.path); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("concerned(%s) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

// sync watches what the drop-ins need and no more, asks for a rescan of
// a drop-in that got a new directory, and logs a directory it cannot
// watch once, however often it tries.
func TestSync(t *testing.T) {
	f := newFakeWatcher()
	f.refuse["/b/dev"] = fmt.Errorf("inotify_add_watch: %w", syscall.ENOSPC)
	var log bytes.Buffer
	dw := newDevWatch(f, slog.New(slog.NewTextHandler(&log, nil)))
	steps := []struct {
		sets   map[string]watchSet
		rescan []string
		dirs   []string
	}{
		{map[string]watchSet{"gpu": {dev: "/a/dev"}, "b": {dev: "/b/dev"}}, []string{"gpu"}, []string{"/a/dev"}},
		{map[string]watchSet{"gpu": {dev: "/a/dev", subdirs: []string{"/a/dev/dri"}}, "b": {dev: "/b/dev"}}, []string{"gpu"}, []string{"/a/dev", "/a/dev/dri"}},
		{map[string]watchSet{"gpu": {dev: "/a/dev", subdirs: []string{"/a/dev/dri"}}, "b": {dev: "/b/dev"}}, nil, []string{"/a/dev", "/a/dev/dri"}},
		{map[string]watchSet{"gpu": {dev: "/a/dev"}}, nil, []string{"/a/dev"}},
	}
	for i, s := range steps {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := dw.sync(s.sets); !reflect.DeepEqual(got, s.rescan) {
				t.Errorf("rescan %v, want %v", got, s.rescan)
			}
			if got := f.dirs(); !reflect.DeepEqual(got, s.dirs) {
				t.Errorf("watched %v, want %v", got, s.dirs)
			}
		})
	}
	if n := strings.Count(log.String(), "cannot watch a device directory"); n != 1 {
		t.Errorf("%d warnings for the directory that cannot be watched, want 1:\n%s", n, log.String())
	}
}

// A directory that went away loses its watch with it: the next sync adds
// it anew, and rescans, since what it held meanwhile was seen by no one.
func TestSyncAfterADirectoryWentAway(t *testing.T) {
	f := newFakeWatcher()
	dw := newDevWatch(f, slog.New(slog.DiscardHandler))
	sets := map[string]watchSet{"gpu": {dev: "/a/dev", subdirs: []string{"/a/dev/dri"}}}
	dw.sync(sets)
	dw.concerned("/a/dev/dri")
	if got := dw.sync(sets); !reflect.DeepEqual(got, []string{"gpu"}) {
		t.Errorf("rescan after the directory came back: %v", got)
	}
}

// Removing a node of a kept device keeps it, unhealthy, until Keep lets
// go; each change is one log line per device, not one per discovery.
func TestVanishedDevices(t *testing.T) {
	root := ttyRoot(t, 41, 42, 43)
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": 40})
	var log bytes.Buffer
	var held sync.Map
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Keep: func(pool string, dev spec.DeviceInfo) bool { _, ok := held.Load(dev.ID); return ok }}
	held.Store("tty42", true)
	steps := []struct {
		name   string
		change func()
		want   string // ids, "!" after an unhealthy one, "~" after a vanished one
	}{
		{"first", func() {}, "tty41,tty42,tty43"},
		{"tty42 and tty43 unplugged, tty42 held", func() { unplug(t, root, "tty42"); unplug(t, root, "tty43") }, "tty41,tty42!~"},
		{"nothing changed", func() {}, "tty41,tty42!~"},
		{"tty42 back", func() { plug(t, root, "tty42") }, "tty41,tty42"},
		{"tty42 gone again", func() { unplug(t, root, "tty42") }, "tty41,tty42!~"},
		{"tty42 let go", func() { held.Delete("tty42") }, "tty41"},
		{"tty41 gone, tty44 new", func() { unplug(t, root, "tty41"); plug(t, root, "tty44") }, "tty44"},
	}
	for _, s := range steps {
		s.change()
		pools, err := d.Discover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := describeDevices(pools); got != s.want {
			t.Errorf("%s: %s, want %s", s.name, got, s.want)
		}
	}
	for msg, want := range map[string]int{`msg="device vanished"`: 2, "device vanished; kept": 2, "device is back": 1,
		"no longer held": 1, "device appeared": 1} {
		if n := strings.Count(log.String(), msg); n != want {
			t.Errorf("%d lines %q, want %d:\n%s", n, msg, want, log.String())
		}
	}
}

// Each device plugged in is logged as appeared and each unplugged as
// vanished, one line each, the first device of an empty pool too: a
// pool whose last device went is gone, and the next device made it anew
// without a line (ttyUSB0 plugged four times gave none).
func TestAppearedAndVanishedPairUp(t *testing.T) {
	root := ttyRoot(t)
	confDir := t.TempDir()
	writeConf(t, confDir, "dev", "usb", "generic", map[string]any{"root": root, "stateDir": t.TempDir(),
		"groups": []map[string]any{{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}})
	var log bytes.Buffer
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Logger: slog.New(slog.NewJSONHandler(&log, nil))}
	steps := []struct {
		plug, unplug []string
		want         string // the lines logged, "+id" appeared and "-id" vanished, in order
	}{
		{nil, nil, ""}, // the first discovery: an empty pool, nothing to log
		{[]string{"ttyUSB0"}, nil, "+serial-ttyUSB0"},
		{nil, []string{"ttyUSB0"}, "-serial-ttyUSB0"},
		{[]string{"ttyUSB0"}, nil, "+serial-ttyUSB0"},
		{[]string{"ttyUSB1"}, nil, "+serial-ttyUSB1"},
		{nil, []string{"ttyUSB0", "ttyUSB1"}, "-serial-ttyUSB0 -serial-ttyUSB1"},
		{[]string{"ttyUSB0", "ttyUSB1"}, nil, "+serial-ttyUSB0 +serial-ttyUSB1"},
		{nil, []string{"ttyUSB1"}, "-serial-ttyUSB1"},
		{nil, []string{"ttyUSB0"}, "-serial-ttyUSB0"},
		{[]string{"ttyUSB0"}, nil, "+serial-ttyUSB0"},
	}
	for i, s := range steps {
		for _, n := range s.plug {
			plug(t, root, n)
		}
		for _, n := range s.unplug {
			unplug(t, root, n)
		}
		log.Reset()
		if _, err := d.Discover(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := deviceLines(t, log.Bytes()); got != s.want {
			t.Errorf("step %d (plugged %v, unplugged %v): logged %q, want %q", i, s.plug, s.unplug, got, s.want)
		}
	}
}

// deviceLines is the "device appeared" and "device vanished" lines of a
// JSON log as "+id" and "-id", in order.
func deviceLines(t *testing.T, log []byte) string {
	var out []string
	for line := range bytes.Lines(log) {
		var rec struct{ Msg, Device string }
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch rec.Msg {
		case "device appeared":
			out = append(out, "+"+rec.Device)
		case "device vanished":
			out = append(out, "-"+rec.Device)
		}
	}
	return strings.Join(out, " ")
}

func describeDevices(pools []Pool) string {
	var out []string
	for _, p := range pools {
		for _, dev := range p.Devices {
			s := dev.ID
			if !dev.Healthy {
				s += "!"
			}
			if p.Vanished[dev.ID] {
				s += "~"
			}
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

// A burst of device events is one INFO for the drop-in they concern, and
// none for another drop-in, whose pools are the last run's.
func TestRunDebouncesABurst(t *testing.T) {
	ttys, other := ttyRoot(t, 41), ttyRoot(t)
	plug(t, other, "ttyUSB0")
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", map[string]any{"root": ttys, "stateDir": t.TempDir(), "num_system_reserved": 40})
	writeConf(t, confDir, "dev", "usb", "generic", map[string]any{"root": other, "stateDir": t.TempDir(),
		"groups": []map[string]any{{"name": "serial", "paths": []string{"/dev/ttyUSB*"}}}})
	infos := &execCounter{}
	f := newFakeWatcher()
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Watch: f, Debounce: 50 * time.Millisecond, OnExec: infos.observe}
	updates := runDiscoverer(t, d)
	if got := describeDevices((<-updates).Pools); got != "serial-ttyUSB0,tty41" {
		t.Fatalf("first discovery: %s", got)
	}
	before := infos.counts()
	for n := 100; n < 200; n++ {
		name := fmt.Sprintf("tty%d", n)
		plug(t, ttys, name)
		f.events <- filepath.Join(ttys, "dev", name)
	}
	u := awaitUpdate(t, updates, func(u Update) bool { return len(find(u.Pools, "tty-generic").Devices) == 101 })
	after := infos.counts()
	if runs := after["generic-tty"] - before["generic-tty"]; runs < 1 || runs > 2 {
		t.Errorf("%d INFO runs of the terminals' drop-in for a burst of 100 events, want 1 or 2", runs)
	}
	if runs := after["generic"] - before["generic"]; runs != 0 {
		t.Errorf("%d INFO runs of the drop-in the events do not concern", runs)
	}
	if u.Event.IsZero() || find(u.Pools, "dev-serial-usb") == nil {
		t.Errorf("the update's event time %v, pools %v", u.Event, names(u.Pools))
	}
}

// A drop-in that does not load is logged once, not again at each
// discovery the device events of another drop-in run (40 identical WARNs
// while a terminal flapped for 10 s); once mended it is said once, and
// broken again it is logged again.
func TestBrokenDropInLoggedOnce(t *testing.T) {
	root := ttyRoot(t, 41)
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": 40})
	broken := filepath.Join(confDir, "tty.d", "broken.conf")
	if err := os.WriteFile(broken, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log bytes.Buffer
	f := newFakeWatcher()
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Watch: f, Debounce: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))}
	updates := runDiscoverer(t, d)
	awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty41" })
	flap := func() {
		for range 5 {
			plug(t, root, "tty42")
			f.events <- filepath.Join(root, "dev", "tty42")
			awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty41,tty42" })
			unplug(t, root, "tty42")
			f.events <- filepath.Join(root, "dev", "tty42")
			awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty41" })
		}
	}
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
	count := func(msg string) int { return strings.Count(logged(), msg) }
	flap()
	if n := count("some drop-ins do not load"); n != 1 {
		t.Errorf("%d lines for the broken drop-in over 11 discoveries, want 1:\n%s", n, logged())
	}
	// Mended, then broken again: each said once, at the next discovery.
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	flap()
	if err := os.WriteFile(broken, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	flap()
	if n, m := count("every drop-in loads again"), count("some drop-ins do not load"); n != 1 || m != 2 {
		t.Errorf("%d lines mended and %d broken, want 1 and 2:\n%s", n, m, logged())
	}
}

// execCounter counts INFO runs by plugin.
type execCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *execCounter) observe(plugin, command, _ string, _ time.Duration) {
	if command != "INFO" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[plugin]++
}

func (c *execCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// runDiscoverer runs d with a period and a drop-in poll of an hour, so
// that only device events discover, and returns its updates.
func runDiscoverer(t *testing.T, d *Discoverer) <-chan Update { return runPolling(t, d, time.Hour) }

// runPolling is runDiscoverer with the drop-ins polled every poll: a
// drop-in rewritten then discovers every drop-in.
func runPolling(t *testing.T, d *Discoverer, poll time.Duration) <-chan Update {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	updates := make(chan Update, 100)
	go func() { defer close(done); d.Run(ctx, time.Hour, poll, func(u Update) { updates <- u }) }()
	t.Cleanup(func() { cancel(); <-done })
	return updates
}

// awaitUpdate returns the first update that ok accepts, failing after
// 10 s: far above the second it should take, far below the period.
func awaitUpdate(t *testing.T, updates <-chan Update, ok func(Update) bool) Update {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case u := <-updates:
			if ok(u) {
				return u
			}
		case <-deadline:
			t.Fatal("no such update within 10 s")
			return Update{}
		}
	}
}

// The real inotify path: a node made in a watched directory, and one
// removed, are discovered without the period.
func TestRunWithInotify(t *testing.T) {
	root := ttyRoot(t, 41)
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": 40})
	w, err := NewInotify()
	if err != nil {
		t.Fatal(err)
	}
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Watch: w}
	updates := runDiscoverer(t, d)
	if got := describeDevices((<-updates).Pools); got != "tty41" {
		t.Fatalf("first discovery: %s", got)
	}
	tests := []struct {
		name   string
		change func()
		want   string
	}{
		{"plugged", func() { plug(t, root, "tty42") }, "tty41,tty42"},
		{"unplugged", func() { unplug(t, root, "tty41") }, "tty42"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			tc.change()
			u := awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == tc.want })
			t.Logf("%s: discovered after %v (event seen %v after the change)", tc.name, time.Since(start), u.Event.Sub(start))
		})
	}
}

// <root>/dev swapped for a link and back: removing a link tells no watch
// of it, so the watch stayed on the link's target and the new directory's
// devices were seen only at the period. Each discovery checks what every
// watched directory is, watches one that was replaced anew, and never
// follows a link out of the drop-in's root. With the real inotify.
func TestWatchFollowsAReplacedDirectory(t *testing.T) {
	for _, tc := range []struct {
		name string
		// target is the directory dev becomes a link to, and the link's
		// text, out of root or within it (relative: the plugins refuse a
		// link that names root's path, which leads out of it in a
		// container); within says which, and so whether the plugin
		// offers tty42 there and the link is watched; logged is the line
		// that says the watch changed.
		target func(t *testing.T, root string) (dir, link string)
		within bool
		logged string
	}{
		{"link out of the root", func(t *testing.T, _ string) (string, string) { d := t.TempDir(); return d, d },
			false, "out of the drop-in's root"},
		{"link within the root", func(t *testing.T, root string) (string, string) { return filepath.Join(root, "alt"), "alt" },
			true, "was replaced; watching it anew"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := ttyRoot(t, 41)
			confDir := t.TempDir()
			// The drop-in is replaced whole: one seen half-written would
			// drop its watches, and watch anew what the test must see
			// watched anew by the check alone.
			staging := t.TempDir()
			conf := func(reserved int) {
				writeConf(t, staging, "tty", "generic", "generic-tty", map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": reserved})
				if err := os.MkdirAll(filepath.Join(confDir, "tty.d"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(staging, "tty.d", "generic.conf"), filepath.Join(confDir, "tty.d", "generic.conf")); err != nil {
					t.Fatal(err)
				}
			}
			conf(40)
			w, err := NewInotify()
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var log bytes.Buffer
			d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Watch: w, Debounce: 10 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))}
			updates := runPolling(t, d, 20*time.Millisecond)
			awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty41" })
			dev := filepath.Join(root, "dev")

			// dev becomes a link; a drop-in rewritten discovers after both steps.
			target, link := tc.target(t, root)
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(target, "tty42"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dev); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(link, dev); err != nil {
				t.Fatal(err)
			}
			conf(39)
			if tc.within {
				awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty42" })
			} else {
				awaitLine(t, &mu, &log, "resolves to "+target, "dir="+dev)
			}

			// Back to a directory, which no event tells of: the next
			// discovery (a drop-in rewritten) must watch it.
			if err := os.Remove(dev); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dev, 0o755); err != nil {
				t.Fatal(err)
			}
			plug(t, root, "tty44")
			conf(40)
			awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty44" })
			// Seen by its event (a rescan or the drop-in's poll may see it
			// too, with no event).
			plug(t, root, "tty45")
			awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty44,tty45" && !u.Event.IsZero() })
			mu.Lock()
			defer mu.Unlock()
			if n := strings.Count(log.String(), tc.logged); n != 1 {
				t.Errorf("%d lines %q, want 1:\n%s", n, tc.logged, log.String())
			}
		})
	}
}

func TestOutOfRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	for _, dir := range []string{"dev/dri", "alt"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"in": "alt", "abs-in": filepath.Join(root, "alt"), "out": outside, "up": "../"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		dir, root string
		out       bool
	}{
		{"dev", root, false}, {"dev/dri", root, false}, {"in", root, false}, {"abs-in", root, false},
		{"out", root, true}, {"up", root, true}, {"missing", root, false}, {"out", "/", false},
	} {
		err := outOfRoot(filepath.Join(root, tc.dir), tc.root)
		if errors.Is(err, errOutOfRoot) != tc.out || (err != nil && !tc.out) {
			t.Errorf("outOfRoot(%s, %s) = %v, want out of root: %v", tc.dir, tc.root, err, tc.out)
		}
	}
}

// awaitLine waits up to 10 s for a line of log holding every one of parts.
func awaitLine(t *testing.T, mu *sync.Mutex, log *bytes.Buffer, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		text := log.String()
		mu.Unlock()
		for line := range strings.Lines(text) {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line with %q within 10 s:\n%s", parts, text)
		}
	}
}

// The inotify Watcher reports entries made and removed, and a watched
// directory that goes away; a directory that is not there cannot be
// watched, and says why.
func TestInotifyEvents(t *testing.T) {
	w, err := NewInotify()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	dir := t.TempDir()
	sub := filepath.Join(dir, "snd")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, sub} {
		if err := w.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Add(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Add of a missing directory: %v", err)
	}
	node := filepath.Join(sub, "pcmC0D0p")
	steps := []struct {
		name   string
		change func() error
		want   string
	}{
		{"create", func() error { return os.WriteFile(node, nil, 0o644) }, node},
		{"remove", func() error { return os.Remove(node) }, node},
		{"directory gone", func() error { return os.Remove(sub) }, sub},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-w.Events():
			if got != s.want {
				t.Errorf("%s: event for %s, want %s", s.name, got, s.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event", s.name)
		}
	}
}

// A Watcher that closes its channels ends the watch, once, and the
// period goes on discovering.
func TestRunOutlivesAClosedWatch(t *testing.T) {
	root := ttyRoot(t, 41)
	confDir := t.TempDir()
	writeConf(t, confDir, "tty", "generic", "generic-tty", map[string]any{"root": root, "stateDir": t.TempDir(), "num_system_reserved": 40})
	f := newFakeWatcher()
	close(f.events)
	close(f.errs)
	var mu sync.Mutex
	var log bytes.Buffer
	d := &Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}, Watch: f,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	updates := make(chan Update, 100)
	go func() { defer close(done); d.Run(ctx, 20*time.Millisecond, time.Hour, func(u Update) { updates <- u }) }()
	defer func() { cancel(); <-done }()
	plug(t, root, "tty42")
	awaitUpdate(t, updates, func(u Update) bool { return describeDevices(u.Pools) == "tty41,tty42" })
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(log.String(), "the device watch ended"); n != 1 {
		t.Errorf("%d lines saying the watch ended, want 1:\n%s", n, log.String())
	}
}

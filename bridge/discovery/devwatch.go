package discovery

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// watchSet is where a drop-in's plugin looks for devices: <root>/dev and
// the directories under root that its inventory's device nodes live in.
// The bridge cannot read a plugin's own args (the generic plugin's
// globs), so every change in <root>/dev concerns every drop-in of that
// root; a change in a subdirectory concerns those with a device there. A
// device in a subdirectory where the drop-in has none yet is seen when
// that directory appears in /dev, else at the period.
type watchSet struct {
	// dev is <root>/dev; "" for a drop-in whose devices have no device
	// node (network endpoints): only the period rediscovers those.
	dev     string
	subdirs []string // sorted, without dev
}

// dropInRoot is the drop-in's root arg, "/" when it has none; an
// unreadable args object gets "/" too, since the plugin itself refuses it.
func dropInRoot(c *invoke.Conf) string {
	var args struct {
		Root string `json:"root"`
	}
	if len(c.Args) > 0 {
		_ = json.Unmarshal(c.Args, &args)
	}
	if args.Root == "" {
		return "/"
	}
	return args.Root
}

// watchDirs is what to watch for drop-in c, given the devices its last
// INFO listed.
func watchDirs(c *invoke.Conf, devices []spec.DeviceInfo) watchSet {
	root := dropInRoot(c)
	dev := filepath.Join(root, "dev")
	ws := watchSet{dev: dev}
	nodes := 0
	for _, d := range devices {
		for _, n := range d.DeviceNodes {
			nodes++
			dir := filepath.Join(root, filepath.Dir(filepath.Clean("/"+n.HostPath)))
			if dir != dev && !slices.Contains(ws.subdirs, dir) {
				ws.subdirs = append(ws.subdirs, dir)
			}
		}
	}
	if len(devices) > 0 && nodes == 0 {
		return watchSet{}
	}
	sort.Strings(ws.subdirs)
	return ws
}

// devWatch keeps a Watcher on the directories of every drop-in and maps
// an event to the drop-ins it concerns. sync runs in discovery jobs and
// concerned in Run's loop: mu guards the maps.
type devWatch struct {
	w   Watcher
	log *slog.Logger

	mu      sync.Mutex
	sets    map[string]watchSet // by drop-in path
	watched map[string]bool     // the directories the Watcher holds
	failed  map[string]bool     // directories whose Add failed, logged once
}

func newDevWatch(w Watcher, log *slog.Logger) *devWatch {
	return &devWatch{w: w, log: log, sets: map[string]watchSet{}, watched: map[string]bool{}, failed: map[string]bool{}}
}

// sync watches the directories of sets, by drop-in, and no others. It
// returns the drop-ins that got a watch on a directory not watched
// before: a device made there between their INFO and the watch was seen
// by neither, so they need one more INFO.
func (dw *devWatch) sync(sets map[string]watchSet) (rescan []string) {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	want := map[string][]string{} // directory -> drop-ins
	for path, ws := range sets {
		if ws.dev == "" {
			continue
		}
		for _, dir := range append([]string{ws.dev}, ws.subdirs...) {
			want[dir] = append(want[dir], path)
		}
	}
	for dir := range dw.watched {
		if _, ok := want[dir]; !ok {
			_ = dw.w.Remove(dir) // fails only for a directory already gone, whose watch went with it
			delete(dw.watched, dir)
		}
	}
	fresh := map[string]bool{}
	for dir, dropIns := range want {
		if dw.watched[dir] {
			continue
		}
		if err := dw.w.Add(dir); err != nil {
			dw.addFailed(dir, err)
			continue
		}
		if dw.failed[dir] {
			dw.log.Info("watching a device directory again", "dir", dir)
			delete(dw.failed, dir)
		}
		dw.watched[dir] = true
		for _, p := range dropIns {
			fresh[p] = true
		}
	}
	dw.sets = sets
	for p := range fresh {
		rescan = append(rescan, p)
	}
	sort.Strings(rescan)
	return rescan
}

// addFailed logs, once per directory, that it is not watched (too many
// watches, a directory gone): its devices are seen at the discovery
// period instead, and each sync tries again.
func (dw *devWatch) addFailed(dir string, err error) {
	if dw.failed[dir] {
		return
	}
	dw.failed[dir] = true
	dw.log.Warn("cannot watch a device directory; its devices are seen at the discovery period", "dir", dir, "error", err)
}

// concerned returns the drop-ins that an event for path concerns.
func (dw *devWatch) concerned(path string) []string {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	if dw.watched[path] {
		// The directory itself went away (or came back, seen from its
		// parent): its watch is gone, and the next sync adds it anew.
		delete(dw.watched, path)
	}
	parent := filepath.Dir(path)
	var out []string
	for p, ws := range dw.sets {
		switch {
		case ws.dev == "":
		case path == ws.dev || parent == ws.dev || slices.Contains(ws.subdirs, path) || slices.Contains(ws.subdirs, parent):
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// all is every drop-in that has directories watched, for a Watcher that
// lost events.
func (dw *devWatch) all() []string {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	var out []string
	for p, ws := range dw.sets {
		if ws.dev != "" {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

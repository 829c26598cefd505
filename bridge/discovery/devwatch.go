package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/cdiexec/cdi/bridge/internal/logrepeat"
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
	watched map[string]dirID    // the directories the Watcher holds, and what each was when added
	// failed logs, once per directory and cause, why it is not watched.
	failed logrepeat.Failures[string]
}

func newDevWatch(w Watcher, log *slog.Logger) *devWatch {
	return &devWatch{w: w, log: log, sets: map[string]watchSet{}, watched: map[string]dirID{}}
}

// sync watches the directories of sets, by drop-in, and no others. It
// returns the drop-ins that got a watch on a directory not watched
// before, or watched anew: a device made there between their INFO and
// the watch was seen by neither, so they need one more INFO.
func (dw *devWatch) sync(sets map[string]watchSet) (rescan []string) {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	want := map[string][]string{} // directory -> drop-ins
	roots := map[string]string{}  // directory -> its drop-ins' root
	for path, ws := range sets {
		if ws.dev == "" {
			continue
		}
		for _, dir := range append([]string{ws.dev}, ws.subdirs...) {
			want[dir] = append(want[dir], path)
			roots[dir] = filepath.Dir(ws.dev)
		}
	}
	for dir := range dw.watched {
		if _, ok := want[dir]; !ok {
			_ = dw.w.Remove(dir) // fails only for a directory already gone, whose watch went with it
			delete(dw.watched, dir)
		}
	}
	dw.failed.Retain(func(dir string) bool { _, ok := want[dir]; return ok })
	fresh := map[string]bool{}
	for dir, dropIns := range want {
		if dw.current(dir) || !dw.watch(dir, roots[dir]) {
			continue
		}
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

// current says whether dir is watched, and the watch is on what dir
// names now. A watch that is not is dropped, logged: the directory was
// replaced, by a link and back, say, and removing a link tells no watch
// of it, so the watch stayed on the link's target.
func (dw *devWatch) current(dir string) bool {
	id, ok := dw.watched[dir]
	if !ok {
		return false
	}
	if identify(dir) == id {
		return true
	}
	_ = dw.w.Remove(dir)
	delete(dw.watched, dir)
	dw.log.Info("a watched device directory was replaced; watching it anew", "dir", dir)
	return false
}

// watch watches dir, unless it resolves, through a link, out of root,
// and says whether it does. A directory that cannot be watched (too many
// watches, gone, a link out of root) is logged once per cause: its
// devices are seen at the discovery period instead, and each sync tries
// again.
func (dw *devWatch) watch(dir, root string) bool {
	id := identify(dir) // before Add: a change in between is seen by the next sync
	err := outOfRoot(dir, root)
	if err == nil {
		err = dw.w.Add(dir)
	}
	if err != nil {
		dw.failed.Of(dir).Warned(dw.log, "cannot watch a device directory; its devices are seen at the discovery period", err, "dir", dir)
		return false
	}
	dw.failed.Of(dir).Succeeded(dw.log, "watching a device directory again", "dir", dir)
	dw.watched[dir] = id
	return true
}

// dirID is what a path named when it was watched: its device and inode,
// through links, as inotify follows them. The zero dirID is a path that
// could not be read.
type dirID struct{ dev, ino uint64 }

func identify(path string) dirID {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return dirID{}
	}
	return dirID{dev: uint64(st.Dev), ino: uint64(st.Ino)} // their widths differ between architectures
}

// errOutOfRoot is wrapped by outOfRoot's error.
var errOutOfRoot = errors.New("a link out of the drop-in's root")

// outOfRoot is non-nil when dir resolves, through links, to a directory
// outside root: inotify would follow the link to a directory the drop-in
// does not own (its plugin skips the nodes there). A path that does not
// resolve is left to the Watcher to refuse.
func outOfRoot(dir, root string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil
	}
	if rel, err := filepath.Rel(realRoot, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%w: %s resolves to %s", errOutOfRoot, dir, real)
	}
	return nil
}

// concerned returns the drop-ins that an event for path concerns.
func (dw *devWatch) concerned(path string) []string {
	dw.mu.Lock()
	defer dw.mu.Unlock()
	// An event for a watched directory itself: it went away (or came
	// back, seen from its parent), its watch is gone, and the next sync
	// adds it anew.
	delete(dw.watched, path)
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

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/node"
)

// hotplugDevices is how many terminals appear, and then vanish, at once.
const hotplugDevices = 100

// hotplugStep is one direction's figures.
type hotplugStep struct {
	name string
	// infos is the INFO runs of the one drop-in it took.
	infos int
	// offered is from the first node made (or removed) until the kubelet
	// had every list it changed: the pool's, and each device's own.
	offered time.Duration
}

// hotplugRig is a node.Node in this process over generic-tty on a root
// of its own whose dev/ holds empty files standing for terminals,
// watched with inotify; the period and the drop-in poll are an hour, so
// that only the watch discovers.
type hotplugRig struct {
	root  string
	k     *kubelet
	mu    sync.Mutex
	infos int
	stop  func()
}

func startHotplugRig(ctx context.Context, dir, binDir string) (*hotplugRig, error) {
	r := &hotplugRig{root: filepath.Join(dir, "root")}
	if err := os.MkdirAll(filepath.Join(r.root, "dev"), 0o755); err != nil {
		return nil, fmt.Errorf("hotplug root: %w", err)
	}
	// tty41 stays throughout, so that the pool is there before and after.
	if err := os.WriteFile(filepath.Join(r.root, "dev", "tty41"), nil, 0o644); err != nil {
		return nil, fmt.Errorf("hotplug root: %w", err)
	}
	confDir := filepath.Join(dir, "conf")
	if err := writeDropIn(confDir, "tty.d/generic.conf", map[string]any{"cdiVersion": "0.1.0", "name": "hotplug",
		"type": "tty", "plugin": "generic-tty", "args": map[string]any{"root": r.root,
			"stateDir": filepath.Join(dir, "state"), "num_system_reserved": 40, "capacity": 1}}); err != nil {
		return nil, err
	}
	w, err := discovery.NewInotify()
	if err != nil {
		return nil, err
	}
	dpDir, err := os.MkdirTemp("", "cdih")
	if err != nil {
		return nil, fmt.Errorf("device-plugin directory: %w", err)
	}
	if r.k, err = startKubelet(dpDir); err != nil {
		os.RemoveAll(dpDir)
		return nil, err
	}
	n := node.New(node.Config{NodeName: nodeName, Domain: domain, DevicePluginDir: dpDir,
		Store: localStore(filepath.Join(dir, "instances.json"))})
	runCtx, cancel := context.WithCancel(ctx)
	done := runNode(runCtx, n, &discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{binDir}, Watch: w, OnExec: r.observe})
	r.stop = func() { cancel(); <-done; r.k.stop(); os.RemoveAll(dpDir) }
	if _, err := r.k.waitList(domain+"/"+ttyPool, 0, settle, allHealthy(1)); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

func (r *hotplugRig) observe(_, command, _ string, _ time.Duration) {
	if command == "INFO" {
		r.mu.Lock()
		r.infos++
		r.mu.Unlock()
	}
}

func (r *hotplugRig) infoRuns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.infos
}

func ttyName(i int) string { return fmt.Sprintf("tty%d", 100+i) }

// step makes (or removes) every terminal's node at once and waits until
// the kubelet has the pool's list of want devices and each terminal's
// own list passes each.
func (r *hotplugRig) step(name string, change func(path string) error, want int, each func([]*pluginapi.Device) bool) (hotplugStep, error) {
	if err := r.k.quiet(200*time.Millisecond, settle); err != nil {
		return hotplugStep{}, err
	}
	from, infos := r.k.counts(), r.infoRuns()
	start := time.Now()
	for i := range hotplugDevices {
		if err := change(filepath.Join(r.root, "dev", ttyName(i))); err != nil {
			return hotplugStep{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	pool := domain + "/" + ttyPool
	last, err := r.k.waitList(pool, from[pool], settle, allHealthy(want))
	if err != nil {
		return hotplugStep{}, fmt.Errorf("%s: %w", name, err)
	}
	for i := range hotplugDevices {
		res := domain + "/" + instance.Name(ttyPool, ttyName(i), nodeName, false)
		l, err := r.k.waitList(res, from[res], settle, each)
		if err != nil {
			return hotplugStep{}, fmt.Errorf("%s: %w", name, err)
		}
		last.At = later(last.At, l.At)
	}
	// INFO runs a little after the last list, if the watch asked for a
	// second: give it the debounce and more to show.
	time.Sleep(3 * discovery.DefaultDebounce)
	return hotplugStep{name: name, infos: r.infoRuns() - infos, offered: last.At.Sub(start)}, nil
}

// hotplug measures 100 terminals appearing at once, then vanishing.
func (b *bench) hotplug(ctx context.Context) error {
	b.progress("hotplug: %d terminals appearing at once, then vanishing", hotplugDevices)
	r, err := startHotplugRig(ctx, filepath.Join(b.tmp, "hotplug"), b.bin)
	if err != nil {
		return fmt.Errorf("hotplug: %w", err)
	}
	defer r.stop()
	appear, err := r.step(fmt.Sprintf("%d appearing", hotplugDevices), func(p string) error { return os.WriteFile(p, nil, 0o644) },
		hotplugDevices+1, allHealthy(1))
	if err != nil {
		return err
	}
	vanish, err := r.step(fmt.Sprintf("%d vanishing", hotplugDevices), os.Remove, 1, allHealthy(0))
	if err != nil {
		return err
	}
	idle, err := b.idleCPU(ctx)
	if err != nil {
		return err
	}
	printHotplug(b.out, []hotplugStep{appear, vanish}, idle, b.o.idle)
	return nil
}

// Hotplug targets: a burst is at most two INFO runs of its drop-in (one,
// and one more if the watch asks for a rescan), and the kubelet has every
// list within a second.
const (
	maxHotplugInfos = 2
	maxHotplugTime  = time.Second
)

// printHotplug prints the two directions and the idle CPU without and
// with the watch.
func printHotplug(w io.Writer, steps []hotplugStep, idle []idleRun, window time.Duration) {
	fmt.Fprintf(w, "\nHotplug: %d terminals (empty files under a root of their own) made at once, then removed at once, under\n", hotplugDevices)
	fmt.Fprintf(w, "node.Node in-process with the real inotify watch (debounce %v), generic-tty, a discovery period of an hour;\n", discovery.DefaultDebounce)
	fmt.Fprintln(w, "from the first change until the kubelet had every list it changed (the pool's and each device's own)")
	tw := newTable(w)
	fmt.Fprintln(tw, "step\tINFO runs\tgoal\tuntil offered (ms)\tgoal\tverdict")
	for _, s := range steps {
		verdict := "ok"
		if s.infos > maxHotplugInfos || s.offered >= maxHotplugTime {
			verdict = "MISSED"
		}
		fmt.Fprintf(tw, "%s\t%d\t<= %d\t%s\t< %v\t%s\n", s.name, s.infos, maxHotplugInfos, ms(s.offered), maxHotplugTime, verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nIdle CPU of the cdi-bridge binary serving %d terminals, nothing changing: user and system time over %v\n", idleDevices, window)
	fmt.Fprintln(w, "(a shortened minute, scaled to one below), from /proc/<pid>/stat in 10 ms ticks; runs in turn")
	tw = newTable(w)
	fmt.Fprintln(tw, "bridge\truns (ms)\tmean (ms)\tper minute (ms)\tx polling only\tverdict")
	var base time.Duration
	for _, watch := range []bool{false, true} {
		var runs []string
		var sum time.Duration
		for _, r := range idle {
			if r.watch == watch {
				runs = append(runs, fmt.Sprint(r.cpu.Milliseconds()))
				sum += r.cpu
			}
		}
		mean := sum / time.Duration(max(len(runs), 1))
		name, ratio, verdict := "--watch-devices=false (polling only)", "1.00", "floor"
		if watch {
			name, ratio, verdict = "--watch-devices=true", fmt.Sprintf("%.2f", float64(mean)/float64(max(base, time.Millisecond))), "ok"
			// Two ticks of slack: the clock's resolution, not the bridge.
			if mean > base+base/10+20*time.Millisecond {
				verdict = "MORE"
			}
		} else {
			base = mean
		}
		perMinute := time.Duration(float64(mean) * float64(time.Minute) / float64(window))
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", name, strings.Join(runs, ", "), mean.Milliseconds(), perMinute.Milliseconds(), ratio, verdict)
	}
	tw.Flush()
}

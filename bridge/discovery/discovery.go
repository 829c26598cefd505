package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/internal/logrepeat"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// Pool is the devices of one resource-spec served by one drop-in.
type Pool struct {
	// Name is "<resource-spec>-<drop-in id>", e.g. "gpu-drm" for the
	// gpu devices of /etc/cdi/gpu.d/drm.conf. It names the
	// Configuration-level resource and prefixes its Instances, and is the
	// same on every node with the same drop-in.
	Name     string
	Resource string
	Conf     *invoke.Conf
	Plugin   *invoke.Plugin
	Devices  []spec.DeviceInfo
	// Err is the last INFO failure; Devices are then the previous run's,
	// all unhealthy.
	Err error
	// Vanished names the devices, by id, that the plugin no longer lists
	// but that are kept among Devices, unhealthy, because Keep said so
	// (a container holds them).
	Vanished map[string]bool
}

// Discoverer runs discovery. Set the fields before the first call; it is
// not safe for concurrent use (Run calls Discover from one goroutine).
type Discoverer struct {
	// ConfDir is the drop-in directory, or several separated by ':' (a
	// host's and a ConfigMap's, say), read in that order.
	ConfDir    string
	PluginDirs []string
	// Timeout bounds each plugin run (0: invoke.DefaultTimeout).
	Timeout time.Duration
	// Deadline is how long one discovery may run before Run logs it as
	// stuck (0: DefaultDeadline).
	Deadline time.Duration
	// MaxDevices caps the devices served from one drop-in (0:
	// DefaultMaxDevices): each is a registration with the kubelet, a
	// socket and a gRPC server. The devices past it, in id order, are
	// refused with an ERROR and a Skip, never served.
	MaxDevices int
	// Exec runs the plugins; nil means invoke.ProcessExec{}.
	Exec invoke.Exec
	// OnExec, if set, is told how long every run of a pool's plugin took:
	// the INFO runs of discovery and the ADD and DEL runs of the
	// Allocates that use the plugin, each with its command and result
	// (ExecOK, ExecError, ExecFailed).
	OnExec func(plugin, command, result string, took time.Duration)
	Logger *slog.Logger
	// Keep, if set, says whether a device of a pool that its plugin no
	// longer lists stays among the pool's devices, unhealthy: the node
	// keeps one that a container holds, so that the container's CDI name
	// still resolves. Without it a vanished device goes at once.
	Keep func(pool string, dev spec.DeviceInfo) bool
	// Watch, if set, tells Run of changes in the device directories, so
	// that a device plugged or unplugged is discovered within Debounce
	// instead of at the next period. Run closes it when it returns.
	Watch Watcher
	// Debounce is how long Run waits after a device event for more
	// before it runs INFO (0: DefaultDebounce), so that a burst of them
	// is one INFO per drop-in.
	Debounce time.Duration

	// results is the last run of each drop-in, by file.
	results map[string]dropInResult
	// problems logs each distinct problem once, and again only every
	// logrepeat.DefaultEvery while it lasts: a drop-in that stays broken
	// is not logged at every device event's discovery.
	problems logrepeat.Failures[problem]
	// skips is what the last Discover skipped, and skippedDevices what
	// the drop-ins' plugins skipped; mu guards them, since Skipped and
	// SkippedDevices are called from other goroutines (health, metrics).
	mu             sync.Mutex
	skips          []Skip
	skippedDevices map[string]map[string]int
	// running is when the discovery under way started; zero when none
	// is (mu).
	running time.Time
	// versions is the VERSION reply of each plugin binary, which the
	// pools' plugins share: VERSION runs once per binary, not before
	// every INFO, and again when the binary changes or refuses the
	// version with code 1.
	versions invoke.VersionCache
}

func (d *Discoverer) setRunning(since time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running = since
}

// ErrStuck is wrapped by Health's error.
var ErrStuck = errors.New("discovery stuck")

// Health is nil unless a discovery of Run has been under way for longer
// than Deadline: blocked in the file system, since its plugin runs have
// timeouts well inside it.
func (d *Discoverer) Health() error {
	d.mu.Lock()
	since := d.running
	d.mu.Unlock()
	if !since.IsZero() && time.Since(since) > d.deadline() {
		return fmt.Errorf("%w: under way for %v (deadline %v)", ErrStuck, time.Since(since).Round(time.Second), d.deadline())
	}
	return nil
}

// Skip is a drop-in, or a pool of one, that discovery did not serve, and
// why. Operators see them in the log, on /readyz and in a metric.
type Skip struct {
	DropIn string // its file, or "" where the reason names it
	Reason string
}

// Skipped returns what the last discovery skipped.
func (d *Discoverer) Skipped() []Skip {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.skips)
}

// problem is one thing a discovery can find wrong: its kind, and the
// drop-in it concerns ("" for the drop-ins as a whole).
type problem struct{ kind, dropIn string }

// The kinds of problem.
const (
	problemLoad    = "load"    // drop-ins that do not load
	problemClash   = "clash"   // drop-ins whose pools share a name
	problemInfo    = "info"    // a drop-in's plugin missing, or its INFO failed
	problemDevices = "devices" // devices of a drop-in that cannot be served
)

// dropInResult is what one drop-in's last INFO gave.
type dropInResult struct {
	pools []Pool
	skips []Skip
	dirs  watchSet
	// skippedDevices is the plugin's skipped_devices (skippedDevices),
	// kept from the last INFO that succeeded.
	skippedDevices map[string]int
}

// Discover loads the drop-ins and runs INFO on each. Drop-ins that do not
// load or whose plugin is missing are logged and skipped; the error is
// non-nil only when the drop-in directory itself cannot be read.
func (d *Discoverer) Discover(ctx context.Context) ([]Pool, error) {
	return d.discover(ctx, nil)
}

// DiscoverDropIns is Discover with INFO run only for the drop-ins of
// those files (and for any drop-in not discovered before): every other
// drop-in's pools are its last run's.
func (d *Discoverer) DiscoverDropIns(ctx context.Context, paths []string) ([]Pool, error) {
	only := make(map[string]bool, len(paths))
	for _, p := range paths {
		only[p] = true
	}
	return d.discover(ctx, only)
}

// discover runs INFO for the drop-ins in only, or for all when only is nil.
func (d *Discoverer) discover(ctx context.Context, only map[string]bool) ([]Pool, error) {
	confs, err := d.loadAll()
	var dirErr *confDirError
	if errors.As(err, &dirErr) {
		return nil, err
	}
	var skips []Skip
	loading := d.problems.Of(problem{kind: problemLoad})
	if err != nil {
		loading.Warned(d.log(), "some drop-ins do not load", err)
		for _, e := range leaves(err) {
			skips = append(skips, Skip{Reason: e.Error()})
		}
	} else {
		loading.Succeeded(d.log(), "every drop-in loads again")
	}
	results := make(map[string]dropInResult, len(confs))
	for _, c := range confs {
		r, ok := d.results[c.Path]
		if !ok || only == nil || only[c.Path] {
			r = d.discoverConf(ctx, c)
		}
		results[c.Path] = r
	}
	d.results = results
	d.problems.Retain(func(p problem) bool { _, ok := results[p.dropIn]; return ok || p.dropIn == "" })
	next, clashSkips := d.merge(confs, results)
	skips = append(skips, clashSkips...)
	d.mu.Lock()
	d.skips, d.skippedDevices = skips, skippedByDropIn(results)
	d.mu.Unlock()
	return sortedPools(next), nil
}

// merge is the pools of every drop-in's result, by name, with the skips
// of those results. Two drop-ins whose pools share a name (gen_x.conf and
// gen-x.conf, or generic.conf and generic.json) are both refused: either
// one's claims could otherwise be served by the other's plugin and state.
func (d *Discoverer) merge(confs []*invoke.Conf, results map[string]dropInResult) (map[string]Pool, []Skip) {
	next := map[string]Pool{}
	clashed := map[string][]string{} // pool name -> its drop-ins
	var skips []Skip
	for _, c := range confs {
		skips = append(skips, results[c.Path].skips...)
		for _, p := range results[c.Path].pools {
			other, ok := next[p.Name]
			switch {
			case ok:
				clashed[p.Name] = []string{other.Conf.Path, p.Conf.Path}
				delete(next, p.Name)
			case clashed[p.Name] != nil:
				clashed[p.Name] = append(clashed[p.Name], p.Conf.Path)
			default:
				next[p.Name] = p
			}
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(clashed)) {
		errs = append(errs, fmt.Errorf("pool %s is made by %s", name, strings.Join(clashed[name], " and ")))
		for _, f := range clashed[name] {
			skips = append(skips, Skip{DropIn: f, Reason: "pool name " + name + " is another drop-in's too"})
		}
	}
	clash := d.problems.Of(problem{kind: problemClash})
	if err := errors.Join(errs...); err != nil {
		clash.Failed(d.log(), "drop-ins skipped: they map to one pool name; rename one of them", err)
	} else {
		clash.Succeeded(d.log(), "no two drop-ins map to one pool name any more")
	}
	return next, skips
}

// watchSets is where each drop-in of the last run looks for devices.
func (d *Discoverer) watchSets() map[string]watchSet {
	out := make(map[string]watchSet, len(d.results))
	for path, r := range d.results {
		out[path] = r.dirs
	}
	return out
}

// leaves flattens the errors joined in err (errors.Join, nested).
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

func (d *Discoverer) discoverConf(ctx context.Context, c *invoke.Conf) dropInResult {
	served := d.problems.Of(problem{kind: problemInfo, dropIn: c.Path})
	p, err := invoke.NewPlugin(c, d.PluginDirs)
	if err != nil {
		served.Failed(d.log(), "drop-in skipped", err, "dropIn", c.Path)
		return dropInResult{skips: []Skip{{DropIn: c.Path, Reason: err.Error()}}}
	}
	p.Exec, p.Timeout, p.MinVersion, p.Versions = d.exec(), d.Timeout, spec.Version010, &d.versions
	p.Stderr = stderrLog{log: d.log(), dropIn: c.Path}
	prev, seen := d.results[c.Path]
	info, err := p.Info(ctx)
	if err != nil {
		served.Failed(d.log(), "INFO failed; keeping the devices last seen, unhealthy", err, "dropIn", c.Path)
		return dropInResult{pools: stale(prev.pools, p, err), dirs: prev.dirs, skips: infoFailed(c.Path, err), skippedDevices: prev.skippedDevices}
	}
	served.Succeeded(d.log(), "drop-in served again", "dropIn", c.Path)
	skippedDevs := skippedDevices(info.Skipped)
	d.noteSkippedDevices(c.Path, prev.skippedDevices, skippedDevs)
	pools, skips := d.group(c, p, info.Devices)
	if seen {
		pools = d.carry(c, p, prev.pools, pools)
	}
	var all []spec.DeviceInfo
	for _, pl := range pools {
		all = append(all, pl.Devices...)
	}
	return dropInResult{pools: pools, skips: skips, dirs: watchDirs(c, all), skippedDevices: skippedDevs}
}

// group puts the devices of drop-in c's INFO into pools by resource-spec,
// leaving out what cannot be served: the devices past MaxDevices, in id
// order; a device whose id CDI refuses as a device name; the devices of a
// pool whose name CDI refuses as a class. It logs them, once while they
// stay the same, and returns the skips to report.
func (d *Discoverer) group(c *invoke.Conf, p *invoke.Plugin, devices []spec.DeviceInfo) ([]Pool, []Skip) {
	var skips []Skip
	var refused []error
	if n, max := len(devices), d.maxDevices(); n > max {
		devices = slices.SortedFunc(slices.Values(devices), func(a, b spec.DeviceInfo) int { return strings.Compare(a.ID, b.ID) })[:max]
		reason := fmt.Sprintf("%d devices, more than the %d a drop-in may serve: the first %d by id are served", n, max, max)
		refused = append(refused, errors.New(reason))
		skips = append(skips, Skip{DropIn: c.Path, Reason: reason})
	}
	byResource := map[string][]spec.DeviceInfo{}
	for _, dev := range devices {
		if err := cdispec.CheckDeviceName(dev.ID); err != nil {
			refused = append(refused, fmt.Errorf("device skipped: its id cannot be a CDI device name: %w", err))
			continue
		}
		byResource[dev.Resource] = append(byResource[dev.Resource], dev)
	}
	var pools []Pool
	for _, res := range slices.Sorted(maps.Keys(byResource)) {
		name := PoolName(res, c.ID())
		if err := cdispec.CheckClassName(name); err != nil {
			err = fmt.Errorf("pool %s: its name cannot be a CDI class: %w", name, err)
			refused = append(refused, err)
			skips = append(skips, Skip{DropIn: c.Path, Reason: err.Error()})
			continue
		}
		pools = append(pools, Pool{Name: name, Resource: res, Conf: c, Plugin: p, Devices: byResource[res]})
	}
	problems := d.problems.Of(problem{kind: problemDevices, dropIn: c.Path})
	if err := errors.Join(refused...); err != nil {
		problems.Failed(d.log(), "devices refused", err, "dropIn", c.Path)
	} else {
		problems.Succeeded(d.log(), "every device of the drop-in served again", "dropIn", c.Path)
	}
	return pools, skips
}

// stale returns a drop-in's pools of the previous run, with every device
// unhealthy and err recorded.
func stale(prev []Pool, p *invoke.Plugin, err error) []Pool {
	var pools []Pool
	for _, old := range prev {
		devs := make([]spec.DeviceInfo, len(old.Devices))
		for i, dev := range old.Devices {
			dev.Healthy = false
			devs[i] = dev
		}
		old.Devices, old.Plugin, old.Err = devs, p, err
		pools = append(pools, old)
	}
	return pools
}

// PoolName is "<resource-spec>-<drop-in id>", lower-cased, with every
// character that a Kubernetes object name cannot hold turned into '-'.
func PoolName(resource, dropIn string) string { return LabelChars(resource + "-" + dropIn) }

// LabelChars is s lower-cased, with every character that a DNS label
// (and so a Kubernetes object name) cannot hold turned into '-'.
func LabelChars(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
}

func sortedPools(m map[string]Pool) []Pool {
	out := make([]Pool, 0, len(m))
	for _, p := range m {
		sort.Slice(p.Devices, func(i, j int) bool { return p.Devices[i].ID < p.Devices[j].ID })
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DefaultMaxDevices is MaxDevices' default: a node of 5,000 devices is
// the largest the bridge is built for (SPEC.md, README).
const DefaultMaxDevices = 5000

func (d *Discoverer) maxDevices() int {
	if d.MaxDevices > 0 {
		return d.MaxDevices
	}
	return DefaultMaxDevices
}

// DefaultDeadline is Deadline's default: far more than a discovery's
// plugin runs take even at their timeout, so that only a discovery that
// is blocked outside them, in the file system, trips it.
const DefaultDeadline = 5 * time.Minute

func (d *Discoverer) deadline() time.Duration {
	if d.Deadline > 0 {
		return d.Deadline
	}
	return DefaultDeadline
}

func (d *Discoverer) log() *slog.Logger {
	if d.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Logger
}

// confDirError is a drop-in directory that cannot be read, which fails a
// discovery; a drop-in that does not load only skips that drop-in.
type confDirError struct {
	dir string
	err error
}

func (e *confDirError) Error() string {
	return fmt.Sprintf("loading drop-ins from %s: %v", e.dir, e.err)
}
func (e *confDirError) Unwrap() error { return e.err }

// loadAll loads the drop-ins of every directory of ConfDir, in order. Its
// error is a *confDirError when a directory cannot be read, else the
// single drop-ins' errors joined.
func (d *Discoverer) loadAll() ([]*invoke.Conf, error) {
	var all []*invoke.Conf
	var errs []error
	for _, dir := range invoke.SplitPath(d.ConfDir) {
		// LoadAll's error mixes the directory's with single drop-ins';
		// only the first is fatal, so ask about the directory on its own.
		if _, err := invoke.ConfTypes(dir); err != nil {
			return nil, &confDirError{dir: dir, err: err}
		}
		confs, err := invoke.LoadAll(dir)
		all = append(all, confs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return all, errors.Join(errs...)
}

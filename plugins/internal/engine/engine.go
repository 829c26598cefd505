package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/disk"
	"github.com/cdiexec/cdi/plugins/internal/sysfs"
	"github.com/cdiexec/cdi/skel"
	"github.com/cdiexec/cdi/spec"
)

// Defaults of the common args.
const (
	DefaultRoot     = "/"
	DefaultStateDir = "/var/lib/cdi"
	maxCapacity     = 1024
	bootIDPath      = "/proc/sys/kernel/random/boot_id"
)

// Deps are the engine's seams to the outside: where state lives, the boot
// id and the clock. Tests replace them; Plugin uses the real ones.
type Deps struct {
	// OpenStore returns the store for a state file path.
	OpenStore func(path, bootID string) store.Store
	BootID    func() string
	Now       func() time.Time
}

// DefaultDeps returns the deps a plugin binary runs with: the disk store,
// the kernel's boot id and the wall clock.
func DefaultDeps() Deps {
	return Deps{
		OpenStore: func(path, bootID string) store.Store { return disk.New(path, bootID) },
		BootID:    readBootID,
		Now:       time.Now,
	}
}

// readBootID reads the kernel's boot id as sysfs.ReadFile reads: the one
// file a call reads outside its state and root, and os.ReadFile would
// bring the runtime's poller up for it.
func readBootID() string {
	b, err := sysfs.ReadFile(bootIDPath, 64)
	if err != nil {
		return "" // not Linux: no reboot detection, everything else works
	}
	return strings.TrimSpace(string(b))
}

// Plugin turns a Family into skel callbacks with the real deps.
func Plugin(f Family) skel.Plugin { return PluginWith(f, DefaultDeps()) }

// PluginWith is Plugin with explicit deps.
func PluginWith(f Family, d Deps) skel.Plugin {
	e := &engine{family: f, deps: d}
	return skel.Plugin{Types: f.Types, Args: append(CommonArgs(), f.Args...),
		Info: e.info, Add: e.add, Del: e.del, List: e.list, GC: e.gc, Serves: e.servedSpecs}
}

type engine struct {
	family Family
	deps   Deps
}

// Names of the common args.
const (
	argRoot     = "root"
	argStateDir = "stateDir"
	argCapacity = "capacity"
	argCDIKind  = "cdiKind"
)

// CommonArgs names the args every plugin of this project honours
// (SPEC.md, "Common arguments"), besides its family's own.
func CommonArgs() []string { return []string{argRoot, argStateDir, argCapacity, argCDIKind} }

// commonArgs are the values of the common args.
type commonArgs struct {
	root     string
	stateDir string
	capacity int
	cdiKind  string
}

func parseCommonArgs(cfg *spec.Config) (commonArgs, error) {
	c := commonArgs{root: DefaultRoot, stateDir: DefaultStateDir, capacity: 1, cdiKind: "cdi.local/" + cfg.Type}
	err := ReadArgs(cfg,
		String(argRoot, &c.root, absolutePath),
		String(argStateDir, &c.stateDir, absolutePath),
		Int(argCapacity, &c.capacity, Between(1, maxCapacity)),
		String(argCDIKind, &c.cdiKind, checkCDIKind),
	)
	return c, err
}

func absolutePath(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	return nil
}

// call is one command's view: the discovered inventory and the locked state.
type call struct {
	args  *skel.Args
	opts  commonArgs
	inv   *Inventory
	state *store.State
	now   time.Time
	// host is what discovery looked at; nodesOK holds the node checks ADD
	// has made (usable).
	host    *Host
	nodesOK map[string]bool
}

// discovery says how much of the device tree a command looks at.
type discovery int

const (
	// stateOnly: none (DEL, LIST, GC).
	stateOnly discovery = iota
	// forAllocation: every device, whose nodes' files are checked only
	// when ADD considers it (usable), since a call that hands out one
	// device of dozens need not stat the nodes of the rest.
	forAllocation
	// wholeInventory: every device with every node checked (INFO).
	wholeInventory
)

// run discovers devices and runs fn on the locked state; the lock is held
// from before discovery until the new state is saved.
func (e *engine) run(a *skel.Args, fn func(c *call) error) error {
	return e.withState(a, forAllocation, store.Store.Update, fn)
}

// view discovers devices and runs fn on the state as a save left it, with
// no lock and no save (store.Store.View): INFO reads, and must work, and
// create nothing, for a user who cannot write the state directory.
func (e *engine) view(a *skel.Args, fn func(c *call) error) error {
	return e.withState(a, wholeInventory, store.Store.View, fn)
}

// runState runs fn on the locked state without discovering devices: DEL
// and GC need only the state, and a release must not fail because a
// device vanished or the device tree cannot be read.
func (e *engine) runState(a *skel.Args, fn func(c *call) error) error {
	return e.withState(a, stateOnly, store.Store.Update, fn)
}

// viewState is view without discovery, for LIST.
func (e *engine) viewState(a *skel.Args, fn func(c *call) error) error {
	return e.withState(a, stateOnly, store.Store.View, fn)
}

// withState runs fn on the state through access (store.Store.Update: under
// the state lock; or View), after discovery unless d is stateOnly. Errors
// that are not protocol errors come from the store and are reported as
// code 13.
func (e *engine) withState(a *skel.Args, d discovery, access func(store.Store, context.Context, func(*store.State) error) error, fn func(c *call) error) error {
	opts, err := parseCommonArgs(a.Config)
	if err != nil {
		return err
	}
	path := disk.StatePath(opts.stateDir, a.Config.Type, a.Config.Plugin)
	st := e.deps.OpenStore(path, e.deps.BootID())
	err = access(st, context.Background(), func(s *store.State) error {
		logDropped(a, s)
		c := &call{args: a, opts: opts, inv: &Inventory{}, state: s, now: e.deps.Now(), nodesOK: map[string]bool{}}
		if d != stateOnly {
			h, inv, err := e.discover(a, opts, d)
			if err != nil {
				return err
			}
			c.host, c.inv = h, inv
		}
		return fn(c)
	})
	var specErr *spec.Error
	if err != nil && !errors.As(err, &specErr) {
		return spec.WrapError(spec.CodeStateError, err)
	}
	return err
}

// servedSpecs lists the resource-specs the configuration serves, for skel
// to tell an unsupported resource-spec from a malformed amount. skel asks
// only about an ADD that is already malformed, so no valid call pays for
// this second discovery.
func (e *engine) servedSpecs(a *skel.Args) ([]spec.ResourceSpec, error) {
	opts, err := parseCommonArgs(a.Config)
	if err != nil {
		return nil, err
	}
	// The whole inventory: a malformed ADD's request names nothing to
	// narrow discovery by.
	_, inv, err := e.discover(a, opts, wholeInventory)
	if err != nil {
		return nil, err
	}
	return inv.Resources, nil
}

func logDropped(a *skel.Args, s *store.State) {
	if len(s.Dropped) > 0 {
		fmt.Fprintf(a.Stderr, "released %d allocation(s) made before the last reboot: %s\n", len(s.Dropped), strings.Join(s.Dropped, ", "))
	}
}

func (e *engine) discover(a *skel.Args, opts commonArgs, d discovery) (*Host, *Inventory, error) {
	h := &Host{Config: a.Config, Root: opts.root, FS: sysfs.HostFS(opts.root), Stderr: a.Stderr,
		SkipProperties: d == forAllocation, DeferNUMA: d == forAllocation}
	// Without a pin, devices of resource-specs the request does not name
	// play no part in an ADD; a pinned one must still be found, to be told
	// apart from an unknown one (code 12).
	if d == forAllocation && a.Devices == nil {
		for _, it := range a.Request {
			h.Wanted = append(h.Wanted, it.Spec)
		}
	}
	inv, err := e.family.Discover(h)
	if err != nil {
		var specErr *spec.Error
		if errors.As(err, &specErr) {
			return nil, nil, err
		}
		return nil, nil, spec.NewError(spec.CodeInternal, "discovering devices under %s: %w", opts.root, err)
	}
	check := checkNodes
	if d == forAllocation {
		check = checkNodePaths
	}
	inv.Devices = keepDevices(h, inv.Devices, check)
	if err := checkInventory(a.Config, inv, opts.capacity); err != nil {
		return nil, nil, spec.WrapError(spec.CodeInternal, err)
	}
	return h, inv, nil
}

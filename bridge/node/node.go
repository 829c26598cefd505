package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/deviceplugin"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/fanout"
	"github.com/cdiexec/cdi/bridge/internal/logrepeat"
	"github.com/cdiexec/cdi/spec"
)

// Config is what a Node needs. Zero durations take their defaults.
type Config struct {
	// NodeName is this node, as the store and usage values name it.
	NodeName string
	// Domain prefixes every resource name: <domain>/<pool> for a
	// Configuration-level resource, <domain>/<instance> for an
	// Instance-level one; it is also the slot annotation's prefix.
	Domain string
	// DevicePluginDir holds the kubelet's kubelet.sock.
	DevicePluginDir string
	Store           instance.Store
	// CDI is where the node's CDI spec files go: one kind per pool,
	// <Domain>/<pool>, named like the pool's Configuration-level
	// resource. Nil writes none and names no device by CDI: every device
	// node goes to the runtime as a DeviceSpec, for runtimes without CDI.
	CDI *cdispec.Dir
	// ExecTimeout bounds each plugin ADD an Allocate runs.
	ExecTimeout time.Duration
	// KubeletPoll is how often the device plugins' registrations are
	// checked.
	KubeletPoll time.Duration
	// MaxInstanceLevel is the most devices a pool may have and still get
	// an Instance-level resource per device; a bigger pool is offered at
	// the Configuration level only. Each Instance-level resource is a
	// socket, a gRPC server and a kubelet connection on this node, and a
	// resource in the Node object's status. Zero is no limit.
	MaxInstanceLevel int
	Logger           *slog.Logger
	// OnRegister, if set, is told of every registration attempt.
	OnRegister func(resource string, err error)
	// OnAllocate, if set, is told of every Allocate call's outcome: the
	// resource, its level (LevelInstance, LevelConfiguration) and the
	// result (ResultOK, ResultDenied, ResultFailed).
	OnAllocate func(resource, level, result string)
	// OnDeviceEvent, if set, is told, for each resource whose list a
	// device event changed (a device node appeared or vanished), how
	// long it took from the event until the list was sent to the kubelet.
	OnDeviceEvent func(took time.Duration)
}

// DefaultMaxInstanceLevel is the default Config.MaxInstanceLevel: a
// thousand Instance-level resources cost the bridge about 50 MB and a
// second to register (make bench).
const DefaultMaxInstanceLevel = 1000

// Levels and results OnAllocate reports.
const (
	LevelInstance      = "instance"
	LevelConfiguration = "configuration"
	// ResultDenied is a call refused before anything was claimed: an
	// unknown id, or no distinct devices for a Configuration-level request.
	ResultOK, ResultDenied = "ok", "denied"
	// ResultFailed is a call whose claim or ADD failed and was undone.
	ResultFailed = "failed"
)

// Node runs the bridge on one node.
type Node struct {
	cfg   Config
	alloc *allocator
	// allocMu is held shared by every Allocate and exclusively by each
	// slot reclaim pass.
	allocMu sync.RWMutex
	// streams tells a device plugin's ListAndWatch, by its resource, that
	// its list changed.
	streams fanout.Keyed
	// refreshMu makes refreshes one at a time, from the store's read to
	// the views built on it: a discovery and a store change refresh from
	// two goroutines, and the one that read the store first must not be
	// the last to build, or the views keep the older Instances until the
	// next change, which may never come.
	refreshMu sync.Mutex

	mu        sync.Mutex
	pools     map[string]discovery.Pool    // by pool name
	cdiNamed  map[string]map[string]bool   // by pool name, the device ids a CDI spec names
	instances map[string]instance.Instance // the store's, by name
	views     map[string]*view             // by pool name, from pools, instances and cdiNamed
	running   map[string]bool              // the resources plugins serves
	// registered is, per running device plugin, whether its last
	// registration attempt with the kubelet succeeded.
	registered map[string]bool
	// heldElsewhere is, by pool, the devices that allocations of no slot
	// of this node hold (reclaim.Plugins.HeldElsewhere): offered as
	// unhealthy.
	heldElsewhere map[string]map[string]bool
	// poolLevelOnly names the pools offered at the Configuration level
	// only (MaxInstanceLevel), so that each is logged once.
	poolLevelOnly map[string]bool
	ready         bool
	plugins       *deviceplugin.Plugins // set by Run
	// storeFailure keeps a store outage from logging every refresh, and
	// specFailure a spec directory that cannot be written (a full disk)
	// from logging every discovery.
	storeFailure, specFailure logrepeat.Failure
	// eventAt is, per resource whose list a device event changed and
	// that has not sent it yet, when the event was seen (OnDeviceEvent).
	eventAt map[string]time.Time
	// poolsEvent is the device event the pools were last published for,
	// until the views are next built: that build, whichever refresh makes
	// it (a store change may come first), holds the pools' changes.
	poolsEvent time.Time
}

// New returns a Node; Run starts it.
func New(cfg Config) *Node {
	n := &Node{
		cfg:   cfg,
		alloc: &allocator{Store: cfg.Store, Timeout: cfg.ExecTimeout, Prefix: cfg.Domain, Logger: cfg.Logger},
		pools: map[string]discovery.Pool{}, instances: map[string]instance.Instance{},
		running: map[string]bool{}, registered: map[string]bool{}, poolLevelOnly: map[string]bool{},
		heldElsewhere: map[string]map[string]bool{},
		eventAt:       map[string]time.Time{},
	}
	n.plugins = &deviceplugin.Plugins{Dir: cfg.DevicePluginDir, Logger: cfg.Logger, PollInterval: cfg.KubeletPoll,
		OnRegister: n.onRegister}
	return n
}

// Readiness is nil once the first discovery has been published and every
// device plugin's last registration with the kubelet succeeded: until
// then no pod on the node can be given the devices. Else it says why.
func (n *Node) Readiness() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.ready {
		return errors.New("discovery has not finished")
	}
	var failed []string
	for res := range n.running {
		if !n.registered[res] {
			failed = append(failed, res)
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		return fmt.Errorf("%d of %d device plugins not registered with the kubelet: %s", len(failed), len(n.running), strings.Join(failed[:min(len(failed), 5)], ", "))
	}
	return nil
}

// onRegister records a registration attempt and passes it on.
func (n *Node) onRegister(resource string, err error) {
	n.mu.Lock()
	if _, running := n.running[resource]; running {
		n.registered[resource] = err == nil
	}
	n.mu.Unlock()
	if n.cfg.OnRegister != nil {
		n.cfg.OnRegister(resource, err)
	}
}

// Run serves the device plugins of the pools Publish hands over, and
// keeps their lists in step with the store, until ctx ends; it returns
// once every device plugin has stopped.
func (n *Node) Run(ctx context.Context) error {
	changes, cancel := n.cfg.Store.Changes()
	defer cancel()
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		for {
			select {
			case <-ctx.Done():
				return
			case <-changes:
				n.refresh(ctx)
			}
		}
	}()
	// Plugins.Run returns once the plugins' empty lists went out and
	// their sockets were removed.
	err := n.plugins.Run(ctx)
	<-refreshed
	return err
}

// refresh reloads the store's Instances and tells the streams whose
// lists changed.
//
// The views are rebuilt even when the store does not answer, over the
// Instances last read: a new discovery (publish) must reach the streams
// whatever the store does.
func (n *Node) refresh(ctx context.Context) {
	n.refreshMu.Lock()
	defer n.refreshMu.Unlock()
	all, err := n.cfg.Store.List(ctx)
	if err != nil {
		n.storeFailure.Failed(n.log(), "reading the instance store", err)
	} else {
		n.storeFailure.Succeeded(n.log(), "reading the instance store works again")
	}
	n.mu.Lock()
	if lacking := instance.Lacking(err); err == nil || lacking != nil {
		n.instances = withListed(n.instances, all, lacking)
	}
	changed := n.rebuildViews()
	if !n.poolsEvent.IsZero() && n.cfg.OnDeviceEvent != nil {
		for _, res := range changed {
			if _, ok := n.eventAt[res]; !ok {
				n.eventAt[res] = n.poolsEvent
			}
		}
	}
	n.poolsEvent = time.Time{}
	n.mu.Unlock()
	n.streams.Notify(changed...)
}

// withListed is the Instances of listed by name, and of old those of the
// pools lacking from listed (a partial list: instance.Lacking), which
// keep what was read of them last.
func withListed(old map[string]instance.Instance, listed []instance.Instance, lacking map[string]bool) map[string]instance.Instance {
	out := make(map[string]instance.Instance, len(listed))
	for name, in := range old {
		if lacking[in.Config] {
			out[name] = in
		}
	}
	for _, in := range listed {
		if !lacking[in.Config] {
			out[in.Name] = in
		}
	}
	return out
}

// sent is told that resource's stream sent the kubelet a list; the first
// after a device event changed it ends that event's time.
func (n *Node) sent(resource string) {
	n.mu.Lock()
	at, ok := n.eventAt[resource]
	delete(n.eventAt, resource)
	n.mu.Unlock()
	if ok {
		n.cfg.OnDeviceEvent(time.Since(at))
	}
}

// Holds says whether a container on this node holds a slot of pool's
// device dev, as the store last told: discovery keeps such a device when
// it vanishes (discovery.Discoverer.Keep).
func (n *Node) Holds(pool string, dev spec.DeviceInfo) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	in, ok := n.instances[instance.Name(pool, dev.ID, n.cfg.NodeName, dev.Shared)]
	if !ok {
		return false
	}
	for _, v := range in.Usage {
		if u, err := instance.ParseUsage(v); err == nil && u.Kind != instance.Free && u.Node == n.cfg.NodeName {
			return true
		}
	}
	return false
}

// pool returns the served pool of that name.
func (n *Node) pool(name string) (discovery.Pool, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.pools[name]
	return p, ok
}

// resource is the extended resource of a pool or an instance.
func (n *Node) resource(name string) string { return n.cfg.Domain + "/" + name }

// reportAllocate tells OnAllocate of one call.
func (n *Node) reportAllocate(resource, level, result string) {
	if n.cfg.OnAllocate != nil {
		n.cfg.OnAllocate(resource, level, result)
	}
}

func (n *Node) log() *slog.Logger {
	if n.cfg.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return n.cfg.Logger
}

var _ deviceplugin.Handler = (*instanceLevelHandler)(nil)
var _ deviceplugin.Handler = (*configurationLevelHandler)(nil)

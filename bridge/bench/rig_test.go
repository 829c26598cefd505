package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// The rig's node: generic-tty over the fixture's tty41-tty44 (above
// num_system_reserved 40), capacity 1, so that a claim changes what the
// other level offers and each stream's update can be told by content.
const (
	domain     = "cdi.bench"
	nodeName   = "bench-node"
	ttyDevices = 4
	ttyDevice  = "tty41" // the device of every Instance-level Allocate
	ttyPool    = "tty-generic"
	settle     = 10 * time.Second // bound on any wait for a list
)

// rig is one bridge node in this process, node.Node as cdi-bridge runs
// it, over the real generic-tty plugin, a store, and the recording
// kubelet on real unix sockets.
type rig struct {
	name string
	k    *kubelet
	// undo is the node's own slot reclaim with no grace and a kubelet
	// whose containers hold nothing: DEL on the plugin, then the store's
	// release, as a container that is gone gets.
	undo *reclaim.Reclaimer
	// plugin is the drop-in's plugin as discovery makes it, for the ADD
	// alone that the Allocates are set against.
	plugin *invoke.Plugin
	// ilInstance is tty41's Instance, il its Instance-level resource and
	// slot its slot 0.
	ilInstance, il, slot string
	store                instance.Store
	// writes returns the API writes the store has made; nil for a store
	// that makes none.
	writes func() int
	// quiet is how long no list may arrive before the streams count as
	// settled after an undo.
	quiet time.Duration
	stop  func()
}

// rigConfig says where a rig lives and what it stores in.
type rigConfig struct {
	name, dir, binDir, fixture string
	store                      instance.Store
	writes                     func() int
	quiet                      time.Duration
}

// startRig writes the drop-in, starts the kubelet and the node, and
// returns once every stream lists every device free.
func startRig(ctx context.Context, c rigConfig) (*rig, error) {
	confDir := filepath.Join(c.dir, "conf")
	if err := writeDropIn(confDir, "tty.d/generic.conf", map[string]any{"cdiVersion": "0.1.0", "name": "bench",
		"type": "tty", "plugin": "generic-tty", "args": map[string]any{"root": c.fixture,
			"stateDir": filepath.Join(c.dir, "state"), "num_system_reserved": 40, "capacity": 1}}); err != nil {
		return nil, err
	}
	plugin, err := dropInPlugin(confDir, "tty", c.binDir)
	if err != nil {
		return nil, err
	}
	// Socket paths are short: not under c.dir.
	dpDir, err := os.MkdirTemp("", "cdib")
	if err != nil {
		return nil, fmt.Errorf("device-plugin directory: %w", err)
	}
	k, err := startKubelet(dpDir)
	if err != nil {
		os.RemoveAll(dpDir)
		return nil, err
	}
	n := node.New(node.Config{NodeName: nodeName, Domain: domain, DevicePluginDir: dpDir, Store: c.store})
	runCtx, cancel := context.WithCancel(ctx)
	done := runNode(runCtx, n, &discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{c.binDir}})
	name := instance.Name(ttyPool, ttyDevice, nodeName, false)
	r := &rig{name: c.name, k: k, undo: n.Reclaimer(noPods{}, 0), plugin: plugin, store: c.store, writes: c.writes,
		quiet: c.quiet, ilInstance: name, il: domain + "/" + name, slot: instance.SlotID(name, 0),
		stop: func() { cancel(); <-done; k.stop(); os.RemoveAll(dpDir) }}
	err = r.waitFree(0, 0)
	if err == nil {
		err = k.quiet(r.quiet, settle)
	}
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	return r, nil
}

// waitFree waits until the pool's stream, from list from on, and tty41's
// Instance-level stream, from ilFrom on, show every device free.
func (r *rig) waitFree(from, ilFrom int) error {
	if _, err := r.k.waitList(domain+"/"+ttyPool, from, settle, allHealthy(ttyDevices)); err != nil {
		return err
	}
	_, err := r.k.waitList(r.il, ilFrom, settle, allHealthy(1))
	return err
}

// allHealthy accepts a list of n devices, every one healthy.
func allHealthy(n int) func([]*pluginapi.Device) bool {
	return func(devs []*pluginapi.Device) bool {
		for _, d := range devs {
			if d.Health != pluginapi.Healthy {
				return false
			}
		}
		return len(devs) == n
	}
}

// writeDropIn writes doc as confDir/rel.
func writeDropIn(confDir, rel string, doc map[string]any) error {
	data, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("drop-in %s: %w", rel, err)
	}
	path := filepath.Join(confDir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("drop-in: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("drop-in: %w", err)
	}
	return nil
}

// dropInPlugin is the plugin of the one drop-in of typ, set up as
// discovery sets up the node's: the protocol version fixed, so that an
// ADD is one exec.
func dropInPlugin(confDir, typ, binDir string) (*invoke.Plugin, error) {
	confs, err := invoke.LoadConfs(confDir, typ)
	if err != nil || len(confs) != 1 {
		return nil, errors.Join(fmt.Errorf("want one %s drop-in in %s, have %d", typ, confDir, len(confs)), err)
	}
	p, err := invoke.NewPlugin(confs[0], []string{binDir})
	if err != nil {
		return nil, fmt.Errorf("the rig's plugin: %w", err)
	}
	p.CDIVersion = spec.Version010
	return p, nil
}

// noPods is a kubelet whose containers hold no device: every claimed
// slot is unused.
type noPods struct{}

func (noPods) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{}, nil
}

// leftovers fails when the plugin still holds an allocation or the store
// a claim: an undo that left something behind.
func (r *rig) leftovers(ctx context.Context) error {
	l, err := r.plugin.List(ctx)
	if err != nil {
		return fmt.Errorf("%s: LIST after the run: %w", r.name, err)
	}
	if len(l.Allocations) != 0 {
		return fmt.Errorf("%s: the plugin holds %d allocations after every undo", r.name, len(l.Allocations))
	}
	all, err := r.store.List(ctx)
	if err != nil {
		return fmt.Errorf("%s: the store after the run: %w", r.name, err)
	}
	for _, in := range all {
		for slot, v := range in.Usage {
			if v != "" {
				return fmt.Errorf("%s: slot %s still claimed (%q) after every undo", r.name, slot, v)
			}
		}
	}
	return nil
}

// runNode runs n and a discovery that hands it every pool, until ctx
// ends; the channel is closed once both have stopped. Nothing is
// rediscovered during a run but for device events: a publish on the
// period would put lists on the streams that no Allocate caused.
func runNode(ctx context.Context, n *node.Node, disc *discovery.Discoverer) <-chan struct{} {
	disc.Keep = n.Holds
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = n.Run(ctx) }()
	go func() {
		defer wg.Done()
		disc.Run(ctx, time.Hour, time.Hour, func(u discovery.Update) { n.Publish(ctx, u) })
	}()
	go func() { wg.Wait(); close(done) }()
	return done
}

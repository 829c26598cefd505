package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec/invoke"
)

type options struct {
	confDir, pluginPath, nodeName, dpDir, domain, metricsAddr, logLevel string
	execTimeout, discoveryPeriod                                        time.Duration
	// The Instance store.
	store, statePath, kubeconfig, namespace string
	// The Lease electing the bridge that does the cluster's jobs
	// (bridge/elected; kube store only); empty turns them off.
	leaseName string
	// Slot reclaim; an empty podResources turns it off.
	podResources               string
	reclaimGrace, reclaimEvery time.Duration
	// CDI spec files, and CDI names in Allocate responses.
	cdiSpecDir string
	cdiNames   bool
	maxDevices int
	// maxInstanceLevel: bigger pools get no Instance-level resources.
	maxInstanceLevel int
	// storeStaleLimit: /healthz fails past it.
	storeStaleLimit time.Duration
	// watchDevices: discover on device directory events, debounced.
	watchDevices  bool
	watchDebounce time.Duration
	// The DRA front end: the pools it serves (none: off), its checkpoint,
	// and the kubelet's directories.
	draPools, draCheckpoint, draPluginDir, draRegistrarDir string
	// brokerNamespaces: those whose Brokers the elected bridge acts on;
	// none turns Brokers off.
	brokerNamespaces string
	// podUID, the bridge's pod's, lets the DRA driver of the next pod of
	// a rolling update register beside this one's.
	podUID string
	// nodeLock is the file whose lock says which of a node's bridges
	// writes its slices (bridge/internal/handover); empty: off.
	nodeLock string
	version  bool
}

// errUsage is wrapped by the errors of a command line that does not parse;
// main exits 2 for them, before anything starts.
var errUsage = errors.New("usage")

// usageHead is what --help says before the flags: what the bridge is,
// with both of its front ends.
const usageHead = `cdi-bridge offers this node's devices, as its CDI plugins find them, to the kubelet through one
of two front ends, chosen per pool: device plugins (a resource per pool and one per device, each
slot claimed in an Instance store: the Kubernetes API or a local file), or DRA (--dra-pools:
ResourceSlices the scheduler allocates from, claims prepared by the plugins). In a cluster one
bridge, elected on a Lease, does the cluster's jobs: clearing departed nodes, publishing the DRA
pools' shared devices, making the Brokers' workloads.

Usage: cdi-bridge [flags]

A flag given empty takes its default, unless it says what empty does.
`

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flagSet(o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q: cdi-bridge takes flags only", errUsage, fs.Arg(0))
	}
	emptyIsDefault(fs)
	if o.nodeName == "" {
		return nil, fmt.Errorf("%w: --node-name is empty, NODE_NAME is not set and the host name is unknown: pass --node-name with this node's name", errUsage)
	}
	return o, nil
}

// flagGroup is the flags of one concern, which --help shows together
// under its title.
type flagGroup struct {
	title string
	add   func(fs *flag.FlagSet, o *options)
}

// flagGroups are cdi-bridge's flags by concern, in the order --help
// shows them (bridge/README.md's flag reference has the same groups).
func flagGroups() []flagGroup {
	return []flagGroup{
		{"Node and plugins", nodeFlags},
		{"Kubelet and container runtime", kubeletFlags},
		{"Instance store and cluster", storeFlags},
		{"DRA", draFlags},
		{"Observability", observabilityFlags},
	}
}

// flagSet is cdi-bridge's flags, parsed into o; its usage prints them by
// group.
func flagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("cdi-bridge", flag.ContinueOnError)
	var groups []*flag.FlagSet
	for _, g := range flagGroups() {
		gs := flag.NewFlagSet(g.title, flag.ContinueOnError)
		g.add(gs, o)
		gs.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
		groups = append(groups, gs)
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		for _, gs := range groups {
			fmt.Fprintf(fs.Output(), "\n%s:\n", gs.Name())
			gs.SetOutput(fs.Output())
			gs.PrintDefaults()
		}
	}
	return fs
}

func nodeFlags(fs *flag.FlagSet, o *options) {
	host, _ := os.Hostname()
	if v := os.Getenv("NODE_NAME"); v != "" {
		host = v
	}
	fs.StringVar(&o.nodeName, "node-name", host, "this node's name, as the Instances record it: $NODE_NAME, else the host name")
	fs.StringVar(&o.confDir, "conf-dir", "/etc/cdi", "drop-in directories, colon-separated, read in order: <dir>/<type>.d/*.conf")
	fs.StringVar(&o.pluginPath, "plugin-path", invoke.DefaultPluginDir, "plugin binaries, a colon-separated search path")
	fs.StringVar(&o.domain, "domain", "cdi.local", "resource domain: resources are <domain>/<pool> and <domain>/<instance>, and the DRA driver is named <domain>")
	fs.DurationVar(&o.execTimeout, "exec-timeout", 30*time.Second, "bound on each plugin run, ADD included (the kubelet gives Allocate none)")
	fs.DurationVar(&o.discoveryPeriod, "discovery-period", time.Minute, "how often INFO runs (drop-in changes are noticed within a second, device changes within --watch-debounce with --watch-devices)")
	fs.BoolVar(&o.watchDevices, "watch-devices", true, "watch the drop-ins' device directories (<root>/dev and where their devices live) with inotify and run INFO for the drop-ins a change concerns; false leaves device changes to --discovery-period")
	fs.DurationVar(&o.watchDebounce, "watch-debounce", discovery.DefaultDebounce, "how long to wait after a device event for more before running INFO, so that a burst is one INFO per drop-in")
	fs.IntVar(&o.maxDevices, "max-devices-per-drop-in", discovery.DefaultMaxDevices, "devices served from one drop-in at most (with the Kubernetes store, at most 5000: what a Presence lists); the rest, in id order, are refused with an error")
}

func kubeletFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.dpDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory, holding kubelet.sock")
	fs.IntVar(&o.maxInstanceLevel, "max-instance-level-devices", node.DefaultMaxInstanceLevel, "a pool of more devices than this is offered at the Configuration level only, with no resource per device (each is a kubelet registration, a socket and a resource in the Node's status); 0 is no limit")
	fs.StringVar(&o.podResources, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources socket, for slot reclaim; empty turns reclaim off")
	fs.DurationVar(&o.reclaimGrace, "reclaim-grace", reclaim.DefaultGrace, "how long a claimed slot may be held by no container before it is released")
	fs.DurationVar(&o.reclaimEvery, "reclaim-period", 30*time.Second, "how often slot reclaim asks the kubelet which slots containers hold")
	fs.StringVar(&o.cdiSpecDir, "cdi-spec-dir", "/var/run/cdi", "where the CDI spec files naming this node's devices are written: a directory the container runtime reads CDI specs from")
	fs.BoolVar(&o.cdiNames, "cdi-names", true, "name devices by CDI in Allocate responses, from spec files in --cdi-spec-dir; false writes no spec file and gives every device node as a device spec, for runtimes without CDI (containerd 1.7's default)")
}

func storeFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.store, "store", storeAuto, "instance store: kube (Instance objects in the API), local (a file on this node), or auto: kube when --kubeconfig is set or in a pod, else local")
	fs.StringVar(&o.statePath, "local-store", "/var/lib/cdi/bridge/instances.json", "the local store's file")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for the kube store (default: the pod's in-cluster configuration)")
	fs.StringVar(&o.namespace, "namespace", defaultNamespace(), "namespace of the Instance objects: $POD_NAMESPACE, else the service account's, else cdi-system")
	fs.StringVar(&o.leaseName, "leader-election-lease", elected.DefaultLease, "Lease in --namespace electing the one bridge that does the cluster's jobs: clearing the claims of deleted Nodes, deleting the Instances no node sees, publishing the DRA pools' shared devices, the Brokers (kube store only); empty turns them off")
	fs.DurationVar(&o.storeStaleLimit, "store-stale-limit", 10*time.Minute, "how long the instance store may be behind the API server before /healthz fails and the kubelet restarts the bridge; 0 never")
	fs.StringVar(&o.brokerNamespaces, "broker-namespaces", "", "namespaces, comma-separated, whose Brokers (bridge/broker) the bridge elected on --leader-election-lease acts on, making their Jobs and Deployments there; empty: Brokers off")
}

func draFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.draPools, "dra-pools", "", "pools served through DRA (ResourceSlices, the driver named --domain) instead of device plugins, comma-separated, e.g. gpu-drm; a pool takes the other pools of its drop-in with it. Empty: DRA off")
	fs.StringVar(&o.draCheckpoint, "dra-checkpoint", "/var/lib/cdi/bridge/dra-claims.json", "the file recording the claims prepared through DRA, so that they can be unprepared after a restart")
	fs.StringVar(&o.draPluginDir, "dra-plugin-dir", "", "directory of the DRA driver's socket (default /var/lib/kubelet/plugins/<domain>)")
	fs.StringVar(&o.draRegistrarDir, "dra-registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory, for the DRA driver")
	fs.StringVar(&o.nodeLock, "node-lock", "", "a file on the host that the bridges of this node lock, so that of two side by side (a DaemonSet update with maxSurge) only the holder writes the node's ResourceSlices; the other splits its pools between the front ends as the holder's record (<file>.json) says, and takes over when the holder stops. Its directory must be writable by its owner only. Empty: off, one bridge per node")
	fs.StringVar(&o.podUID, "pod-uid", "", "the UID of the bridge's pod (the downward API's metadata.uid): with --dra-pools, the DRA driver registers under the pod's own socket names, so that the next pod of a DaemonSet update (maxSurge) serves beside it until it stops (kubelet 1.33 or later); empty: one registration, replaced at a restart")
}

func observabilityFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.metricsAddr, "metrics-address", ":8089", "address serving /metrics, /healthz and /readyz; empty turns it off")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print cdi-bridge's build and exit")
}

// emptyIsDefault gives every flag that was set to "" its default, unless
// its empty value means something of its own (turns a part off): a
// command line such as --node-name "$NODE_NAME", with the variable unset
// on a fresh machine, means the default, not a node without a name.
func emptyIsDefault(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "metrics-address", "pod-resources-socket", "leader-election-lease":
			return // empty turns it off
		}
		if f.Value.String() == "" && f.DefValue != "" {
			_ = f.Value.Set(f.DefValue) // a string flag's Set takes any value
		}
	})
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/deviceplugin"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec/buildinfo"
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
	podUID  string
	version bool
}

// errUsage is wrapped by the errors of a command line that does not parse;
// main exits 2 for them, before anything starts.
var errUsage = errors.New("usage")

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

// flagSet is cdi-bridge's flags, parsed into o.
func flagSet(o *options) *flag.FlagSet {
	host, _ := os.Hostname()
	if v := os.Getenv("NODE_NAME"); v != "" {
		host = v
	}
	fs := flag.NewFlagSet("cdi-bridge", flag.ContinueOnError)
	fs.StringVar(&o.confDir, "conf-dir", "/etc/cdi", "drop-in directories, colon-separated, read in order: <dir>/<type>.d/*.conf")
	fs.StringVar(&o.pluginPath, "plugin-path", invoke.DefaultPluginDir, "plugin binaries, a colon-separated search path")
	fs.StringVar(&o.nodeName, "node-name", host, "this node's name, as the Instances record it: $NODE_NAME, else the host name")
	fs.StringVar(&o.dpDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory, holding kubelet.sock")
	fs.StringVar(&o.domain, "domain", "cdi.local", "resource domain: resources are <domain>/<pool> and <domain>/<instance>")
	fs.StringVar(&o.store, "store", storeAuto, "instance store: kube (Instance objects in the API), local (a file on this node), or auto: kube when --kubeconfig is set or in a pod, else local")
	fs.StringVar(&o.statePath, "local-store", "/var/lib/cdi/bridge/instances.json", "the local store's file")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for the kube store (default: the pod's in-cluster configuration)")
	fs.StringVar(&o.namespace, "namespace", defaultNamespace(), "namespace of the Instance objects: $POD_NAMESPACE, else the service account's, else cdi-system")
	fs.StringVar(&o.leaseName, "leader-election-lease", elected.DefaultLease, "Lease in --namespace electing the one bridge that does the cluster's jobs: clearing the claims of deleted Nodes, deleting the Instances no node sees, publishing the DRA pools' shared devices, the Brokers (kube store only); empty turns them off")
	fs.StringVar(&o.podResources, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources socket, for slot reclaim; empty turns reclaim off")
	fs.DurationVar(&o.reclaimGrace, "reclaim-grace", reclaim.DefaultGrace, "how long a claimed slot may be held by no container before it is released")
	fs.DurationVar(&o.reclaimEvery, "reclaim-period", 30*time.Second, "how often slot reclaim asks the kubelet which slots containers hold")
	fs.StringVar(&o.cdiSpecDir, "cdi-spec-dir", "/var/run/cdi", "where the CDI spec files naming this node's devices are written: a directory the container runtime reads CDI specs from")
	fs.BoolVar(&o.cdiNames, "cdi-names", true, "name devices by CDI in Allocate responses, from spec files in --cdi-spec-dir; false writes no spec file and gives every device node as a device spec, for runtimes without CDI (containerd 1.7's default)")
	fs.BoolVar(&o.version, "version", false, "print cdi-bridge's build and exit")
	fs.IntVar(&o.maxDevices, "max-devices-per-drop-in", discovery.DefaultMaxDevices, "devices served from one drop-in at most (with the Kubernetes store, at most 5000: what a Presence lists); the rest, in id order, are refused with an error")
	fs.IntVar(&o.maxInstanceLevel, "max-instance-level-devices", node.DefaultMaxInstanceLevel, "a pool of more devices than this is offered at the Configuration level only, with no resource per device (each is a kubelet registration, a socket and a resource in the Node's status); 0 is no limit")
	fs.StringVar(&o.metricsAddr, "metrics-address", ":8089", "address serving /metrics, /healthz and /readyz; empty turns it off")
	fs.DurationVar(&o.storeStaleLimit, "store-stale-limit", 10*time.Minute, "how long the instance store may be behind the API server before /healthz fails and the kubelet restarts the bridge; 0 never")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.execTimeout, "exec-timeout", 30*time.Second, "bound on each plugin run, ADD included (the kubelet gives Allocate none)")
	fs.DurationVar(&o.discoveryPeriod, "discovery-period", time.Minute, "how often INFO runs (drop-in changes are noticed within a second, device changes within --watch-debounce with --watch-devices)")
	fs.BoolVar(&o.watchDevices, "watch-devices", true, "watch the drop-ins' device directories (<root>/dev and where their devices live) with inotify and run INFO for the drop-ins a change concerns; false leaves device changes to --discovery-period")
	fs.DurationVar(&o.watchDebounce, "watch-debounce", discovery.DefaultDebounce, "how long to wait after a device event for more before running INFO, so that a burst is one INFO per drop-in")
	fs.StringVar(&o.draPools, "dra-pools", "", "pools served through DRA (ResourceSlices, the driver named --domain) instead of device plugins, comma-separated, e.g. gpu-drm; a pool takes the other pools of its drop-in with it. Empty: DRA off")
	fs.StringVar(&o.draCheckpoint, "dra-checkpoint", "/var/lib/cdi/bridge/dra-claims.json", "the file recording the claims prepared through DRA, so that they can be unprepared after a restart")
	fs.StringVar(&o.draPluginDir, "dra-plugin-dir", "", "directory of the DRA driver's socket (default /var/lib/kubelet/plugins/<domain>)")
	fs.StringVar(&o.draRegistrarDir, "dra-registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory, for the DRA driver")
	fs.StringVar(&o.brokerNamespaces, "broker-namespaces", "", "namespaces, comma-separated, whose Brokers (bridge/broker) the bridge elected on --leader-election-lease acts on, making their Jobs and Deployments there; empty: Brokers off")
	fs.StringVar(&o.podUID, "pod-uid", "", "the UID of the bridge's pod (the downward API's metadata.uid): with --dra-pools, the DRA driver registers under the pod's own socket names, so that the next pod of a DaemonSet update (maxSurge) serves beside it until it stops (kubelet 1.33 or later); empty: one registration, replaced at a restart")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "cdi-bridge offers this node's CDI plugin devices to the kubelet as device plugins, one per device\n"+
			"and one per pool, and keeps every device's usage slots in an Instance store (the Kubernetes API, or\n"+
			"a local file).\n\nUsage: cdi-bridge [flags]\n\nFlags (one given empty takes its default, unless it says what empty does):\n")
		fs.PrintDefaults()
	}
	return fs
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

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.version {
		fmt.Println("cdi-bridge", buildinfo.Version())
		return nil
	}
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	log.Info("starting", "version", buildinfo.Version(), "node", o.nodeName, "confDir", o.confDir, "pluginPath", o.pluginPath, "domain", o.domain)
	api, err := resolveKube(o)
	if err != nil {
		return err
	}
	slices, err := startSlices(ctx, o, api, log)
	if err != nil {
		return err
	}
	if slices != nil {
		defer slices.Stop()
	}
	store, err := openStore(ctx, o, api, log)
	if err != nil {
		return err
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	m := metrics.New(buildinfo.Version())
	podResources, err := dialPodResources(ctx, o, log)
	if err != nil {
		return err
	}
	// One Dir for the node's files and the DRA claims': opening one
	// removes what an earlier run's writes left, which a second would
	// take the first's writes under way for.
	cdiDir, err := openCDI(o, log)
	if err != nil {
		return err
	}
	front, err := startDRA(ctx, o, api, slices, store, cdiDir, podResources, m, log, fail)
	if err != nil {
		return err
	}
	jobs, err := electedJobs(o, api, store, front, log)
	if err != nil {
		return err
	}
	stopElected, err := startElected(ctx, o, api, store, jobs, log)
	if err != nil {
		return err
	}
	defer stopElected()
	if removed, err := deviceplugin.RemoveStaleSockets(o.dpDir, o.domain); err != nil || len(removed) > 0 {
		log.Info("removed sockets no process serves, left by a bridge that was killed", "count", len(removed), "error", err)
	}
	disc := &discovery.Discoverer{ConfDir: o.confDir, PluginDirs: invoke.SplitPath(o.pluginPath), Timeout: o.execTimeout,
		MaxDevices: o.maxDevices, OnExec: m.Exec, Logger: log, Watch: deviceWatch(o, log), Debounce: o.watchDebounce}
	m.SkippedDropIns(func() int { return len(disc.Skipped()) })
	m.SkippedDevices(disc.SkippedDevices)
	stale := staleness(store)
	m.StoreStale(func() time.Time { since, _ := stale(); return since })
	n := newNode(o, store, cdiDir, m, log)
	startReclaim(ctx, o, n, podResources, log)
	if o.metricsAddr != "" {
		h := readiness{n: n, disc: disc, stale: stale, staleLimit: o.storeStaleLimit}
		if front != nil {
			h.dra = front.Registered
		}
		if err := serveHTTP(ctx, o.metricsAddr, h, m, log); err != nil {
			return err
		}
	}
	fronts := frontEnds{node: n, dra: front, draPools: drafront.ParsePools(o.draPools)}
	disc.Keep = fronts.holds
	served := make(chan error, 1)
	go func() { served <- n.Run(ctx) }()
	log.Info("discovering devices", "period", o.discoveryPeriod)
	disc.Run(ctx, o.discoveryPeriod, time.Second, fronts.publish(ctx))
	err = <-served
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the DRA kubelet plugin failed
	}
	log.Info("stopped")
	return err
}

// electedJobs are the elected bridge's jobs beside the departed-node
// janitor: the DRA front end's publishing of shared devices, when it
// runs, and the Brokers, when --broker-namespaces names any namespace.
func electedJobs(o *options, api *kubeAccess, store instance.Store, front *drafront.FrontEnd, log *slog.Logger) ([]elected.Job, error) {
	var jobs []elected.Job
	if front != nil {
		jobs = append(jobs, front.SharedJob())
	}
	brokers, err := brokerJob(o, api, store, log)
	if err != nil {
		return nil, err
	}
	if brokers != nil {
		jobs = append(jobs, brokers)
	}
	return jobs, nil
}

// newNode is the device plugins' node as the flags set it up, its
// figures reported to m.
func newNode(o *options, store instance.Store, cdiDir *cdispec.Dir, m *metrics.Metrics, log *slog.Logger) *node.Node {
	n := node.New(node.Config{
		NodeName: o.nodeName, Domain: o.domain, DevicePluginDir: o.dpDir, ExecTimeout: o.execTimeout, Store: store, CDI: cdiDir,
		Logger: log, OnAllocate: m.Allocation, OnRegister: m.Registration,
		MaxInstanceLevel: o.maxInstanceLevel, OnDeviceEvent: m.DeviceEvent,
	})
	m.Pools(n.Usage)
	return n
}

// deviceWatch is the inotify Watcher of --watch-devices, or nil: off, or
// refused by the kernel (too many inotify instances), which leaves
// device changes to the discovery period rather than stopping the bridge.
func deviceWatch(o *options, log *slog.Logger) discovery.Watcher {
	if !o.watchDevices {
		log.Info("device watching off: devices come and go at the discovery period", "period", o.discoveryPeriod)
		return nil
	}
	w, err := discovery.NewInotify()
	if err != nil {
		log.Warn("cannot watch device directories; devices come and go at the discovery period", "period", o.discoveryPeriod, "error", err)
		return nil
	}
	return w
}

// newLogger is the bridge's JSON log on stderr, at level.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l, ReplaceAttr: readableDurations})), nil
}

// readableDurations writes durations as Go writes them ("5m0s"), not as
// the JSON handler's integer nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// openCDI opens --cdi-spec-dir, or returns nil with --cdi-names=false.
func openCDI(o *options, log *slog.Logger) (*cdispec.Dir, error) {
	if !o.cdiNames {
		log.Info("CDI names off: every device node goes to the runtime as a device spec")
		return nil, nil
	}
	d, err := cdispec.Open(o.cdiSpecDir, o.domain)
	if err != nil {
		return nil, fmt.Errorf("--cdi-spec-dir, --domain: %w", err)
	}
	log.Info("CDI spec files", "dir", o.cdiSpecDir)
	return d, nil
}

// dialPodResources connects to the kubelet's PodResources API, which
// slot reclaim and the DRA front end ask what its containers hold, until
// ctx ends; nil when --pod-resources-socket is empty.
func dialPodResources(ctx context.Context, o *options, log *slog.Logger) (reclaim.Lister, error) {
	if o.podResources == "" {
		log.Warn("the kubelet's PodResources API is off: slots of containers that are gone stay claimed, and the DRA front end releases nothing the kubelet does not unprepare")
		return nil, nil
	}
	conn, client, err := reclaim.Dial(o.podResources)
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); conn.Close() }()
	return client, nil
}

// startReclaim runs slot reclaim against the kubelet's PodResources API
// until ctx ends, unless it is off (podResources nil).
func startReclaim(ctx context.Context, o *options, n *node.Node, podResources reclaim.Lister, log *slog.Logger) {
	if podResources == nil {
		return
	}
	log.Info("slot reclaim", "socket", o.podResources, "grace", o.reclaimGrace, "period", o.reclaimEvery)
	go n.Reclaimer(podResources, o.reclaimGrace).Run(ctx, o.reclaimEvery)
}

// readiness is what /readyz and /healthz report on.
type readiness struct {
	n     *node.Node
	disc  *discovery.Discoverer
	stale func() (time.Time, error)
	// staleLimit is how long the store may be stale before /healthz
	// fails; 0 never.
	staleLimit time.Duration
	// dra, with the DRA front end on, is nil once the kubelet has
	// registered its driver: a pod whose claim the kubelet tried before
	// that waits for the kubelet's next look at it, up to a minute.
	dra func() error
}

// health is nil unless the bridge is stuck in a way a restart may mend:
// a discovery blocked past its deadline, or a store behind the API
// server for longer than the limit.
func (h readiness) health() error {
	if err := h.disc.Health(); err != nil {
		return err
	}
	if since, err := h.stale(); h.staleLimit > 0 && !since.IsZero() && time.Since(since) > h.staleLimit {
		return fmt.Errorf("the instance store has been behind the API server for %v (limit %v): %v",
			time.Since(since).Round(time.Second), h.staleLimit, err)
	}
	return nil
}

// ready is the node's readiness, then the DRA driver's registration.
func (h readiness) ready() error {
	if err := h.n.Readiness(); err != nil {
		return err
	}
	if h.dra != nil {
		return h.dra()
	}
	return nil
}

// staleness is the store's Stale, or never stale for a store without one
// (the local file).
func staleness(store instance.Store) func() (time.Time, error) {
	if s, ok := store.(interface{ Stale() (time.Time, error) }); ok {
		return s.Stale
	}
	return func() (time.Time, error) { return time.Time{}, nil }
}

// serveHTTP serves, on one listener, /metrics, /healthz (readiness.health)
// and /readyz: ready once the first discovery is published
// and every device plugin registered (node.Readiness), the DRA driver
// too when it runs, and while the instance store's view is current. Its body lists the
// drop-ins discovery skipped, which do not make the bridge unready: the
// others are served.
func serveHTTP(ctx context.Context, addr string, h readiness, m *metrics.Metrics, log *slog.Logger) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.health(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if since, err := h.stale(); !since.IsZero() {
			http.Error(w, fmt.Sprintf("the instance store has been behind the API server for %v: %v",
				time.Since(since).Round(time.Second), err), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		for _, s := range h.disc.Skipped() {
			fmt.Fprintf(w, "skipped drop-in %s: %s\n", s.DropIn, s.Reason)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	log.Info("serving metrics and health", "address", lis.Addr().String())
	return nil
}

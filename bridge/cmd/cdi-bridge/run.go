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
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/deviceplugin"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/internal/handover"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec/buildinfo"
	"github.com/cdiexec/cdi/spec/invoke"
)

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
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	b, err := setUp(ctx, o, log, fail)
	defer b.stop()
	if err != nil {
		return err
	}
	err = b.serve(ctx)
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the DRA kubelet plugin, or the wait for the node lock, failed
	}
	log.Info("stopped")
	return err
}

// parts is cdi-bridge's parts as the flags set them up (setUp), until
// they serve (serve).
type parts struct {
	o            *options
	log          *slog.Logger
	m            *metrics.Metrics
	api          *kubeAccess // nil without the Kubernetes API
	store        instance.Store
	podResources reclaim.Lister     // nil: off
	cdiDir       *cdispec.Dir       // nil: --cdi-names=false
	front        *drafront.FrontEnd // nil: DRA off
	lock         *handover.Lock     // nil: --node-lock off
	stops        []func()           // in the order they were started
}

// setUp starts, in the order each needs the last, what serving the
// node's devices rests on: the client configuration, the node lock, the
// node's slice controller (as early as it can: its start takes a
// second; with the lock, it waits for it), the Instance store, the
// kubelet's PodResources API, the CDI spec directory, the DRA front end
// and the elected bridge's candidate. fail is told of an error the DRA
// kubelet plugin cannot recover from, and of a wait for the node lock
// that failed. What it started is stopped by stop, whether it returns
// an error or not.
func setUp(ctx context.Context, o *options, log *slog.Logger, fail func(error)) (*parts, error) {
	b := &parts{o: o, log: log, m: metrics.New(buildinfo.Version())}
	var err error
	if b.api, err = resolveKube(o); err != nil {
		return b, err
	}
	if b.lock, err = openNodeLock(ctx, o, log, fail); err != nil {
		return b, err
	}
	slices, err := startSlices(ctx, o, b.api, b.lock, log)
	if b.lock != nil || slices != nil {
		// At the stop, or as soon as ctx ends: the other bridge of the
		// node waits for the lock, which goes only once this bridge's
		// slice controller has stopped.
		handOver := sync.OnceFunc(func() { stopSlices(slices); releaseNodeLock(b.lock, log) })
		context.AfterFunc(ctx, handOver)
		b.stops = append(b.stops, handOver)
	}
	if err != nil {
		return b, err
	}
	if b.store, err = openStore(ctx, o, b.api, log); err != nil {
		return b, err
	}
	if b.podResources, err = dialPodResources(ctx, o, log); err != nil {
		return b, err
	}
	// One Dir for the node's files and the DRA claims': opening one
	// removes what a killed run's writes left, once a minute old.
	if b.cdiDir, err = openCDI(o, log); err != nil {
		return b, err
	}
	if b.front, err = startDRA(ctx, o, b.api, slices, b.store, b.cdiDir, b.podResources, b.m, log, fail); err != nil {
		return b, err
	}
	jobs, err := electedJobs(o, b.api, b.store, b.front, log)
	if err != nil {
		return b, err
	}
	stopElected, err := startElected(ctx, o, b.api, b.store, jobs, log)
	if err != nil {
		return b, err
	}
	b.stops = append(b.stops, stopElected)
	return b, nil
}

// stop stops what setUp started, the last first.
func (b *parts) stop() {
	for i := len(b.stops) - 1; i >= 0; i-- {
		b.stops[i]()
	}
}

// serve runs discovery, the device plugins' node, slot reclaim and the
// health and metrics listener until ctx ends, each discovery's pools
// handed to the front ends (frontEnds).
func (b *parts) serve(ctx context.Context) error {
	o, log, m := b.o, b.log, b.m
	if removed, err := deviceplugin.RemoveStaleSockets(o.dpDir, o.domain); err != nil || len(removed) > 0 {
		log.Info("removed sockets no process serves, left by a bridge that was killed", "count", len(removed), "error", err)
	}
	disc := newDiscoverer(o, m, log)
	stale := staleness(b.store)
	m.StoreStale(func() time.Time { since, _ := stale(); return since })
	n := newNode(o, b.store, b.cdiDir, m, log)
	startReclaim(ctx, o, n, b.podResources, b.api, log)
	if o.metricsAddr != "" {
		h := readiness{n: n, disc: disc, stale: stale, staleLimit: o.storeStaleLimit}
		if b.front != nil {
			h.dra = b.front.Registered
		}
		if err := serveHTTP(ctx, o.metricsAddr, h, m, log); err != nil {
			return err
		}
	}
	fronts := newFrontEnds(n, b.front, drafront.ParsePools(o.draPools), b.lock, log)
	go fronts.follow(ctx, time.Second)
	disc.Keep = fronts.holds
	served := make(chan error, 1)
	go func() { served <- n.Run(ctx) }()
	log.Info("discovering devices", "period", o.discoveryPeriod)
	disc.Run(ctx, o.discoveryPeriod, time.Second, fronts.publish(ctx))
	return <-served
}

// newDiscoverer is discovery as the flags set it up, its figures
// reported to m.
func newDiscoverer(o *options, m *metrics.Metrics, log *slog.Logger) *discovery.Discoverer {
	disc := &discovery.Discoverer{ConfDir: o.confDir, PluginDirs: invoke.SplitPath(o.pluginPath), Timeout: o.execTimeout,
		MaxDevices: o.maxDevices, OnExec: m.Exec, Logger: log, Watch: deviceWatch(o, log), Debounce: o.watchDebounce}
	m.SkippedDropIns(func() int { return len(disc.Skipped()) })
	m.SkippedDevices(disc.SkippedDevices)
	return disc
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
// until ctx ends, unless it is off (podResources nil). With the API, a
// pod that held slots and that the kubelet no longer lists is looked up
// (a get of that pod), and its slots go at once if it has ended.
func startReclaim(ctx context.Context, o *options, n *node.Node, podResources reclaim.Lister, api *kubeAccess, log *slog.Logger) {
	if podResources == nil {
		return
	}
	r := n.Reclaimer(podResources, o.reclaimGrace)
	if api != nil {
		r.PodEnded = podEnded(api.client)
	}
	log.Info("slot reclaim", "socket", o.podResources, "grace", o.reclaimGrace, "period", o.reclaimEvery,
		"podsLookedUp", r.PodEnded != nil)
	go r.Run(ctx, o.reclaimEvery)
}

// podEndedTimeout bounds the read of a pod that held slots: an API
// server that does not answer leaves its slots to the grace.
const podEndedTimeout = 5 * time.Second

// podEnded asks the API server whether a pod (<namespace>/<name>) has
// ended: it is gone, or done.
func podEnded(client kubernetes.Interface) func(ctx context.Context, pod string) (bool, error) {
	return func(ctx context.Context, key string) (bool, error) {
		ns, name, _ := strings.Cut(key, "/")
		ctx, cancel := context.WithTimeout(ctx, podEndedTimeout)
		defer cancel()
		pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, err
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	}
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

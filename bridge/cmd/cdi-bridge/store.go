package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cdiexec/cdi/bridge/departed"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/instance/local"
)

// Store kinds for --store.
const (
	storeAuto  = "auto"
	storeKube  = "kube"
	storeLocal = "local"
)

// syncTimeout bounds the wait for the first list of Instances: a bridge
// that cannot reach the API server exits, and its DaemonSet restarts it.
const syncTimeout = 2 * time.Minute

// kubeAccess is the bridge's one way to the Kubernetes API: the client
// configuration, resolved once, and the typed client built once from it,
// which the store, the departed-node janitor and the DRA front end share.
// (The store also makes its dynamic client from cfg, watching its own
// requests to know when its view is stale.)
type kubeAccess struct {
	cfg    *rest.Config
	client kubernetes.Interface
	// reason says where cfg came from, for the log.
	reason string
}

// resolveKube resolves the API's client configuration from --kubeconfig,
// else the pod's in-cluster one, when anything needs the API (the
// Kubernetes store, possibly auto's, or the DRA front end); nil when
// nothing does, or when auto finds no configuration.
func resolveKube(o *options) (*kubeAccess, error) {
	if o.store == storeLocal && len(drafront.ParsePools(o.draPools)) == 0 {
		return nil, nil
	}
	var cfg *rest.Config
	reason := "--kubeconfig"
	if o.kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		cfg = c
	} else {
		c, err := rest.InClusterConfig()
		switch {
		case errors.Is(err, rest.ErrNotInCluster):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("in-cluster configuration: %w", err)
		}
		cfg, reason = c, "in-cluster configuration"
	}
	cfg.UserAgent = "cdi-bridge/" + o.nodeName
	cfg.QPS, cfg.Burst = kube.ClientQPS, kube.ClientBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &kubeAccess{cfg: cfg, client: client, reason: reason}, nil
}

// openStore opens the Instance store --store selects. auto is the
// Kubernetes store when the API can be reached (api not nil: --kubeconfig
// set, or the bridge runs in a pod), else the local file.
func openStore(ctx context.Context, o *options, api *kubeAccess, log *slog.Logger) (instance.Store, error) {
	kind, reason, err := chooseStore(o, api)
	if err != nil {
		return nil, err
	}
	if kind == storeLocal {
		path := filepath.Clean(o.statePath)
		log.Info("instance store: local file", "file", path, "reason", reason)
		return local.New(path), nil
	}
	if o.maxDevices > kube.MaxPresenceDevices {
		return nil, fmt.Errorf("%w: --max-devices-per-drop-in=%d: a Presence of the Kubernetes store lists at most %d devices of a pool",
			errUsage, o.maxDevices, kube.MaxPresenceDevices)
	}
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	log.Info("instance store: Kubernetes", "server", api.cfg.Host, "namespace", o.namespace, "reason", reason)
	s, err := kube.StartConfig(ctx, api.cfg, o.namespace, kube.ServedPools)
	if err == nil {
		err = s.Synced(syncCtx)
	}
	if err != nil {
		return nil, fmt.Errorf("instance store at %s: %w", api.cfg.Host, err)
	}
	return s, nil
}

// startDeparted runs the departed-node janitor (bridge/departed) until
// ctx ends or the returned stop is called, with the Kubernetes store
// only: a local store is one node's, with no other nodes' claims in it.
// stop waits until the janitor has let go of its Lease, so that when the
// leader's bridge exits another takes over at once, not when the lease
// runs out. whileLeading, if not nil, is the leader's other work (the
// DRA front end's publishing of shared devices).
func startDeparted(ctx context.Context, o *options, api *kubeAccess, store instance.Store,
	whileLeading func(context.Context, departed.Store), log *slog.Logger) (stop func(), err error) {
	_, ok := store.(*kube.Store)
	if !ok || api == nil {
		if whileLeading != nil {
			log.Warn("shared devices of the DRA pools are not published: the bridge elected to publish them needs the Kubernetes store")
		}
		return func() {}, nil
	}
	if o.leaseName == "" {
		log.Warn("departed nodes' claims are not cleared, nor shared devices of DRA pools published: --leader-election-lease is empty")
		return func() {}, nil
	}
	// The leader's Store of every pool, beside the node's own.
	open := func(ctx context.Context) (departed.Store, error) {
		s, err := kube.StartConfig(ctx, api.cfg, o.namespace, kube.AllPools)
		if err != nil {
			return nil, err
		}
		syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
		defer cancel()
		return s, s.Synced(syncCtx)
	}
	j, err := departed.New(departed.Config{Client: api.client, OpenStore: open, Node: o.nodeName, Namespace: o.namespace,
		Lease: o.leaseName, Logger: log, WhileLeading: whileLeading})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := j.Run(ctx); err != nil {
			log.Error("departed-node janitor stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// chooseStore resolves --store, and says why, for the log.
func chooseStore(o *options, api *kubeAccess) (kind, reason string, err error) {
	switch {
	case o.store == storeLocal:
		return storeLocal, "--store local", nil
	case o.store != storeKube && o.store != storeAuto:
		return "", "", fmt.Errorf("--store %q: want auto, kube or local", o.store)
	case api != nil:
		return storeKube, api.reason, nil
	case o.store == storeKube:
		return "", "", fmt.Errorf("--store kube without --kubeconfig, and not in a cluster: %w", rest.ErrNotInCluster)
	}
	return storeLocal, "neither --kubeconfig nor an in-cluster configuration", nil
}

// defaultNamespace is where the Instances live: the pod's own namespace
// when it runs in one (POD_NAMESPACE from the downward API, or the
// service account's), else cdi-system.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(data) > 0 {
		return string(data)
	}
	return "cdi-system"
}

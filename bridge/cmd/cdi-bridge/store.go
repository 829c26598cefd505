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

// openStore opens the Instance store --store selects. auto is the
// Kubernetes store when --kubeconfig is set or the bridge runs in a pod
// (in-cluster configuration found), else the local file. For the
// Kubernetes store it also returns the client configuration, nil for the
// local one.
func openStore(ctx context.Context, o *options, log *slog.Logger) (instance.Store, *rest.Config, error) {
	kind, cfg, reason, err := chooseStore(o)
	if err != nil {
		return nil, nil, err
	}
	if kind == storeLocal {
		path := filepath.Clean(o.statePath)
		log.Info("instance store: local file", "file", path, "reason", reason)
		return local.New(path), nil, nil
	}
	if o.maxDevices > kube.MaxPresenceDevices {
		return nil, nil, fmt.Errorf("%w: --max-devices-per-drop-in=%d: a Presence of the Kubernetes store lists at most %d devices of a pool",
			errUsage, o.maxDevices, kube.MaxPresenceDevices)
	}
	cfg.UserAgent = "cdi-bridge/" + o.nodeName
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	log.Info("instance store: Kubernetes", "server", cfg.Host, "namespace", o.namespace, "reason", reason)
	s, err := kube.StartConfig(ctx, cfg, o.namespace, kube.ServedPools)
	if err == nil {
		err = s.Synced(syncCtx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("instance store at %s: %w", cfg.Host, err)
	}
	return s, cfg, nil
}

// startDeparted runs the departed-node janitor (bridge/departed) until
// ctx ends or the returned stop is called, with the Kubernetes store
// only: a local store is one node's, with no other nodes' claims in it.
// stop waits until the janitor has let go of its Lease, so that when the
// leader's bridge exits another takes over at once, not when the lease
// runs out. whileLeading, if not nil, is the leader's other work (the
// DRA front end's publishing of shared devices).
func startDeparted(ctx context.Context, o *options, cfg *rest.Config, store instance.Store,
	whileLeading func(context.Context, departed.Store), log *slog.Logger) (stop func(), err error) {
	_, ok := store.(*kube.Store)
	if !ok || cfg == nil {
		if whileLeading != nil {
			log.Warn("shared devices of the DRA pools are not published: the bridge elected to publish them needs the Kubernetes store")
		}
		return func() {}, nil
	}
	if o.leaseName == "" {
		log.Warn("departed nodes' claims are not cleared, nor shared devices of DRA pools published: --leader-election-lease is empty")
		return func() {}, nil
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	// The leader's Store of every pool, beside the node's own.
	open := func(ctx context.Context) (departed.Store, error) {
		s, err := kube.StartConfig(ctx, cfg, o.namespace, kube.AllPools)
		if err != nil {
			return nil, err
		}
		syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
		defer cancel()
		return s, s.Synced(syncCtx)
	}
	j, err := departed.New(departed.Config{Client: client, OpenStore: open, Node: o.nodeName, Namespace: o.namespace,
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

// chooseStore resolves --store, for the Kubernetes store loading the
// client configuration, and says why, for the log.
func chooseStore(o *options) (kind string, cfg *rest.Config, reason string, err error) {
	switch o.store {
	case storeLocal:
		return storeLocal, nil, "--store local", nil
	case storeKube, storeAuto:
	default:
		return "", nil, "", fmt.Errorf("--store %q: want auto, kube or local", o.store)
	}
	if o.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return "", nil, "", fmt.Errorf("--kubeconfig: %w", err)
		}
		return storeKube, cfg, "--kubeconfig", nil
	}
	cfg, err = rest.InClusterConfig()
	switch {
	case err == nil:
		return storeKube, cfg, "in-cluster configuration", nil
	case o.store == storeKube:
		return "", nil, "", fmt.Errorf("--store kube without --kubeconfig, and not in a cluster: %w", err)
	case errors.Is(err, rest.ErrNotInCluster):
		return storeLocal, nil, "neither --kubeconfig nor an in-cluster configuration", nil
	}
	return "", nil, "", fmt.Errorf("in-cluster configuration: %w", err)
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

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

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
// (in-cluster configuration found), else the local file.
func openStore(ctx context.Context, o *options, log *slog.Logger) (instance.Store, error) {
	kind, cfg, err := chooseStore(o)
	if err != nil {
		return nil, err
	}
	if kind == storeLocal {
		path := filepath.Clean(o.statePath)
		log.Info("instance store: local file", "file", path, "reason", o.storeReason)
		return local.New(path), nil
	}
	cfg.UserAgent = "cdi-bridge/" + o.nodeName
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	log.Info("instance store: Kubernetes", "server", cfg.Host, "namespace", o.namespace, "reason", o.storeReason)
	s, err := kube.Start(ctx, client, o.namespace)
	if err == nil {
		err = s.Synced(syncCtx)
	}
	if err != nil {
		return nil, fmt.Errorf("instance store at %s: %w", cfg.Host, err)
	}
	return s, nil
}

// chooseStore resolves --store, and for the Kubernetes store loads the
// client configuration.
func chooseStore(o *options) (string, *rest.Config, error) {
	switch o.store {
	case storeLocal:
		o.storeReason = "--store local"
		return storeLocal, nil, nil
	case storeKube, storeAuto:
	default:
		return "", nil, fmt.Errorf("--store %q: want auto, kube or local", o.store)
	}
	if o.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return "", nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		o.storeReason = "--kubeconfig"
		return storeKube, cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	switch {
	case err == nil:
		o.storeReason = "in-cluster configuration"
		return storeKube, cfg, nil
	case o.store == storeKube:
		return "", nil, fmt.Errorf("--store kube without --kubeconfig, and not in a cluster: %w", err)
	case errors.Is(err, rest.ErrNotInCluster):
		o.storeReason = "neither --kubeconfig nor an in-cluster configuration"
		return storeLocal, nil, nil
	}
	return "", nil, fmt.Errorf("in-cluster configuration: %w", err)
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

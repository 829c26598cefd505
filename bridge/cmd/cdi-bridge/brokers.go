package main

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/broker"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// brokerJob is the Broker controller (bridge/broker), a job of the
// elected bridge, when --broker-namespaces names any namespace; else nil.
// It has clients of its own built from the bridge's configuration: a
// Broker's thousand creates then wait on their own rate limit, not on the
// janitor's or the DRA front end's.
func brokerJob(o *options, api *kubeAccess, store instance.Store, log *slog.Logger) (elected.Job, error) {
	// A comma-separated list, read as --dra-pools is.
	namespaces := slices.Sorted(maps.Keys(drafront.ParsePools(o.brokerNamespaces)))
	if len(namespaces) == 0 {
		return nil, nil
	}
	if _, ok := store.(*kube.Store); !ok || api == nil || o.leaseName == "" {
		return nil, fmt.Errorf("%w: --broker-namespaces needs the Kubernetes store and --leader-election-lease: the elected bridge makes the Brokers' workloads", errUsage)
	}
	cfg := rest.CopyConfig(api.cfg)
	cfg.UserAgent = "cdi-bridge-brokers/" + o.nodeName
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c, err := broker.New(broker.Config{Client: client, Dynamic: dyn, Metadata: md, Namespaces: namespaces, Domain: o.domain,
		DRAPools: slices.Sorted(maps.Keys(drafront.ParsePools(o.draPools))), Logger: log})
	if err != nil {
		return nil, err
	}
	return c, nil
}

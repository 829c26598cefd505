package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/broker"
	"github.com/cdiexec/cdi/bridge/departed"
	"github.com/cdiexec/cdi/bridge/drafront"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// withBrokers is whileLeading with the Broker controller (bridge/broker)
// beside it, when --broker-namespaces names any namespace; else
// whileLeading as it is. The controller runs in the bridge elected on
// the Kubernetes store's Lease, with clients of its own built from the
// bridge's configuration: a Broker's thousand creates then wait on their
// own rate limit, not on the janitor's or the DRA front end's.
func withBrokers(o *options, api *kubeAccess, store instance.Store, whileLeading func(context.Context, departed.Store),
	log *slog.Logger) (func(context.Context, departed.Store), error) {
	// A comma-separated list, read as --dra-pools is.
	namespaces := slices.Sorted(maps.Keys(drafront.ParsePools(o.brokerNamespaces)))
	if len(namespaces) == 0 {
		return whileLeading, nil
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
	c, err := broker.New(broker.Config{Client: client, Dynamic: dyn, Namespaces: namespaces, Domain: o.domain,
		DRAPools: slices.Sorted(maps.Keys(drafront.ParsePools(o.draPools))), Logger: log})
	if err != nil {
		return nil, err
	}
	brokers := func(ctx context.Context, store departed.Store) {
		if err := c.Run(ctx, store); err != nil {
			log.Error("the Broker controller stopped; it starts again when this bridge next leads", "err", err)
		}
	}
	return alongside(whileLeading, brokers), nil
}

// alongside is the leader's jobs run side by side, each in a goroutine
// of its own; it returns once every one has. A nil job is none.
func alongside(jobs ...func(context.Context, departed.Store)) func(context.Context, departed.Store) {
	return func(ctx context.Context, store departed.Store) {
		var wg sync.WaitGroup
		for _, job := range jobs {
			if job != nil {
				wg.Go(func() { job(ctx, store) })
			}
		}
		wg.Wait()
	}
}

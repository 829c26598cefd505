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
)

// withBrokers is whileLeading with the Broker controller (bridge/broker)
// beside it, when --broker-namespaces names any namespace; else
// whileLeading as it is. cfg is the Kubernetes store's configuration: the
// controller runs in the bridge elected on its Lease.
func withBrokers(o *options, cfg *rest.Config, whileLeading func(context.Context, departed.Store), log *slog.Logger) (func(context.Context, departed.Store), error) {
	namespaces := slices.Sorted(maps.Keys(parsePoolList(o.brokerNamespaces)))
	if len(namespaces) == 0 {
		return whileLeading, nil
	}
	if cfg == nil || o.leaseName == "" {
		return nil, fmt.Errorf("%w: --broker-namespaces needs the Kubernetes store and --leader-election-lease: the elected bridge makes the Brokers' workloads", errUsage)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.UserAgent = broker.ClientQPS, broker.ClientBurst, "cdi-bridge-brokers/"+o.nodeName
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c, err := broker.New(broker.Config{Client: client, Dynamic: dyn, Namespaces: namespaces, Domain: o.domain,
		DRAPools: slices.Sorted(maps.Keys(parsePoolList(o.draPools))), Logger: log})
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

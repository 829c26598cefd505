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
	"path/filepath"
	"time"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance/local"
	"github.com/cdiexec/cdi/bridge/metrics"
	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/spec/invoke"
)

type options struct {
	confDir, pluginPath, nodeName, dpDir, domain, store, statePath, metricsAddr, logLevel string
	execTimeout, discoveryPeriod                                                          time.Duration
}

func parseFlags(args []string) (*options, error) {
	host, _ := os.Hostname()
	if v := os.Getenv("NODE_NAME"); v != "" {
		host = v
	}
	o := &options{}
	fs := flag.NewFlagSet("cdi-bridge", flag.ContinueOnError)
	fs.StringVar(&o.confDir, "conf-dir", "/etc/cdi", "drop-in directory: <conf-dir>/<type>.d/*.conf")
	fs.StringVar(&o.pluginPath, "plugin-path", invoke.DefaultPluginDir, "plugin binaries, a colon-separated search path")
	fs.StringVar(&o.nodeName, "node-name", host, "this node's name (default $NODE_NAME, else the host name)")
	fs.StringVar(&o.dpDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory, holding kubelet.sock")
	fs.StringVar(&o.domain, "domain", "cdi.local", "resource domain: resources are <domain>/<pool> and <domain>/<instance>")
	fs.StringVar(&o.store, "store", "local", "instance store: local (a file on this node)")
	fs.StringVar(&o.statePath, "local-store", "/var/lib/cdi/bridge/instances.json", "the local store's file")
	fs.StringVar(&o.metricsAddr, "metrics-address", ":8089", "address serving /metrics, /healthz and /readyz; empty turns it off")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.execTimeout, "exec-timeout", 30*time.Second, "bound on each plugin run, ADD included (the kubelet gives Allocate none)")
	fs.DurationVar(&o.discoveryPeriod, "discovery-period", time.Minute, "how often INFO runs (drop-in changes are noticed within a second)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.nodeName == "" {
		return nil, errors.New("--node-name is empty and the host name unknown")
	}
	if o.store != "local" {
		return nil, fmt.Errorf("--store %q: only local is available", o.store)
	}
	return o, nil
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	log.Info("starting", "node", o.nodeName, "store", o.store, "file", o.statePath, "confDir", o.confDir, "domain", o.domain)
	m := metrics.New()
	n := node.New(node.Config{
		NodeName: o.nodeName, Domain: o.domain, DevicePluginDir: o.dpDir, ExecTimeout: o.execTimeout,
		Store: local.New(filepath.Clean(o.statePath)),
		Discoverer: &discovery.Discoverer{ConfDir: o.confDir, PluginDirs: invoke.SplitPath(o.pluginPath), Timeout: o.execTimeout,
			OnExec: m.Exec, Logger: log},
		DiscoveryPeriod: o.discoveryPeriod, Logger: log, OnAllocate: m.Allocation, OnRegister: m.Registration,
	})
	if o.metricsAddr != "" {
		if err := serveHTTP(ctx, o.metricsAddr, n, m, log); err != nil {
			return err
		}
	}
	err = n.Run(ctx)
	log.Info("stopped")
	return err
}

// serveHTTP serves, on one listener, /metrics, /healthz (while the
// process runs) and /readyz (once the first discovery is published).
func serveHTTP(ctx context.Context, addr string, n *node.Node, m *metrics.Metrics, log *slog.Logger) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !n.Ready() {
			http.Error(w, "discovery has not finished", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	log.Info("serving metrics and health", "address", lis.Addr().String())
	return nil
}

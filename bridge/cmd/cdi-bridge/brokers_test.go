package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/departed"
	"github.com/cdiexec/cdi/bridge/instance"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/instance/local"
)

// Brokers need the elected bridge: without the Kubernetes store or the
// Lease, --broker-namespaces is a usage error, not a silent no-op.
func TestBrokersNeedTheLease(t *testing.T) {
	api := &kubeAccess{cfg: &rest.Config{Host: "https://127.0.0.1:1"}}
	for _, tc := range []struct {
		name  string
		api   *kubeAccess
		store instance.Store
		lease string
	}{
		{"the local store", api, local.New(filepath.Join(t.TempDir(), "instances.json")), departed.DefaultLease},
		{"no API", nil, &kube.Store{}, departed.DefaultLease},
		{"no Lease", api, &kube.Store{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &options{brokerNamespaces: "cams", leaseName: tc.lease, domain: "cdi.local", nodeName: "n1"}
			if _, err := withBrokers(o, tc.api, tc.store, nil, slog.Default()); !errors.Is(err, errUsage) {
				t.Errorf("%v, want a usage error", err)
			}
		})
	}
	o := &options{leaseName: departed.DefaultLease}
	if got, err := withBrokers(o, nil, nil, nil, slog.Default()); got != nil || err != nil {
		t.Errorf("without --broker-namespaces: a job %v, %v; want the leader's work as it was (none)", got != nil, err)
	}
}

// The leader's jobs run side by side, and together end when each has.
func TestAlongside(t *testing.T) {
	var ran atomic.Int32
	job := func(ctx context.Context, _ departed.Store) {
		ran.Add(1)
		<-ctx.Done()
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		alongside(job, nil, job)(ctx, nil)
		close(done)
	}()
	for ran.Load() != 2 {
		select {
		case <-done:
			t.Fatal("returned before its jobs ended")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	<-done
}

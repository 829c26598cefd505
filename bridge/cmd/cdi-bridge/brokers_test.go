package main

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/elected"
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
		{"the local store", api, local.New(filepath.Join(t.TempDir(), "instances.json")), elected.DefaultLease},
		{"no API", nil, &kube.Store{}, elected.DefaultLease},
		{"no Lease", api, &kube.Store{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &options{brokerNamespaces: "cams", leaseName: tc.lease, domain: "cdi.local", nodeName: "n1"}
			if _, err := brokerJob(o, tc.api, tc.store, slog.Default()); !errors.Is(err, errUsage) {
				t.Errorf("%v, want a usage error", err)
			}
		})
	}
	o := &options{leaseName: elected.DefaultLease}
	if got, err := brokerJob(o, nil, nil, slog.Default()); got != nil || err != nil {
		t.Errorf("without --broker-namespaces: a job %v, %v; want none", got != nil, err)
	}
}

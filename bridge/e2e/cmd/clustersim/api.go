package main

import (
	"context"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// startAPI runs etcd and a kube-apiserver (built once, then cached) with
// the Instance CRD installed. The caller calls stopAPI. An error wrapping
// apitest.ErrUnavailable means etcd or the Go toolchain is missing.
func startAPI(ctx context.Context) (*apitest.Env, error) {
	env, err := apitest.Run(ctx, apitest.Options{})
	if err != nil {
		return nil, fmt.Errorf("test API server: %w", err)
	}
	crd, err := apitest.RepoFile(apitest.InstanceCRD)
	if err == nil {
		err = apitest.InstallCRD(ctx, env.Config, crd)
	}
	if err != nil {
		stopAPI(env)
		return nil, fmt.Errorf("installing the Instance CRD: %w", err)
	}
	return env, nil
}

// stopAPI stops the servers and removes their directory, logs included:
// a simulation that got this far has no use for them.
func stopAPI(env *apitest.Env) error {
	err := env.Stop()
	os.RemoveAll(env.Dir)
	if err != nil {
		return fmt.Errorf("stopping the test API server: %w", err)
	}
	return nil
}

// newNamespace creates a namespace of a fresh name for the simulation's
// Instances.
func newNamespace(ctx context.Context, cfg *rest.Config) (string, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("kubernetes client: %w", err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace"}}
	ns.SetGenerateName("clustersim-")
	got, err := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).
		Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a namespace: %w", err)
	}
	return got.GetName(), nil
}

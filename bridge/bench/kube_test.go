package bench

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// newKubeStore is a Store with a client of its own, as the bridge of one
// node has; its informer runs until ctx ends.
func newKubeStore(ctx context.Context, cfg *rest.Config, namespace, node string) (*kube.Store, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "cdi-bench/" + node
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	s, err := kube.New(ctx, client, namespace, kube.AllPools)
	if err != nil {
		return nil, fmt.Errorf("kube store for %s: %w", node, err)
	}
	return s, nil
}

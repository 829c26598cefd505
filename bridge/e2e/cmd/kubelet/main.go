// Command kubelet is the Kubernetes node agent built from the published
// k8s.io/kubernetes module, so that bridge/e2e/node can run a real node
// (kubelet, containerd, runc) beside cdi-bridge without a cluster. `make
// node-bins` builds it. It is built without -trimpath, as the
// kube-apiserver is, so that the Kubernetes packages the two share come
// from the build cache instead of being compiled twice.
//
// The blank imports are those of the released kubelet's main
// (k8s.io/kubernetes/cmd/kubelet), so that this one behaves the same.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}

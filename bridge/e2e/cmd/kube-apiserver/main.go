// Command kube-apiserver is the Kubernetes API server built from the
// published k8s.io/kubernetes module, so that tests can run the bridge's
// Kubernetes store against a real apiserver without a cluster. The harness
// in bridge/internal/testing/apitest builds and starts it.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}

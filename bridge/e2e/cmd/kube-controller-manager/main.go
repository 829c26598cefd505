// Command kube-controller-manager is the Kubernetes controller manager
// built from the published k8s.io/kubernetes module, for the node test:
// its DaemonSet controller makes the bridge's pod, and its service
// account, root CA and node lifecycle controllers give that pod what it
// gets in a cluster.
//
// The blank imports are those of the released command's main
// (k8s.io/kubernetes/cmd/kube-controller-manager), so that this one behaves the same.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}

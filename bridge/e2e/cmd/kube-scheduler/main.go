// Command kube-scheduler is the Kubernetes scheduler built from the
// published k8s.io/kubernetes module, for the node test: the DaemonSet's
// pods are bound to their node by the scheduler, as in a cluster.
//
// The blank imports are those of the released command's main
// (k8s.io/kubernetes/cmd/kube-scheduler), so that this one behaves the same.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}

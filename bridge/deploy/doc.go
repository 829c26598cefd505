// Package deploy holds the bridge's Kubernetes manifests: a Helm chart
// (chart/) and, generated from its default rendering by ./gen-kustomize
// (make manifests), a kustomize layout (kubectl apply -k bridge/deploy):
// the cdi-system namespace, the Instance, Presence and Broker CRDs (crd/),
// the bridge's ServiceAccount with least-privilege RBAC, a headless metrics
// Service, and the DaemonSet, whose image ./image builds and whose init
// step is ./cdi-install. The chart's brokers.enabled adds the Brokers'
// RBAC, which examples/brokers/rbac.yaml holds for kustomize beside
// example Brokers; examples/dra holds the DRA front end's.
//
// The package has no code of its own, only tests: they check that the
// kustomization renders the chart's objects, lint and render the chart
// with other values, render the kustomization as kustomize would and
// apply every object to a real API server (bridge/internal/testing/apitest), run a
// real cdi-bridge holding the manifests' permissions and nothing more, and
// check that everything outside them is refused.
package deploy

// Package apitest runs a real Kubernetes API server for tests: an etcd
// (Debian's etcd-server, /usr/bin/etcd) and a kube-apiserver built from
// the published Kubernetes sources in the bridge/e2e module, each started
// by the test itself on free local ports and stopped with it.
//
// The server authenticates with static bearer tokens and authorizes with
// RBAC, so tests can check the bridge's own ClusterRole: the admin token
// is in system:masters, and Options.Users adds identities with no rights
// until a test binds them some. Options.ExtraArgs adds apiserver flags or
// replaces Start's own: a node test's Node authorizer and NodeRestriction
// admission plugin, say.
//
// The kube-apiserver binary is built once and kept in the user's cache
// directory under a name derived from the bridge/e2e module's go.mod,
// go.sum and main.go, so later runs reuse it and a change to any of them
// builds it again; a file lock keeps test binaries of several packages
// from building it at the same time. A cold build downloads several
// hundred megabytes of modules and takes minutes.
//
// Where etcd or the Go toolchain is missing, Start fails when the CI
// environment variable is set and skips the test otherwise, saying what
// to install.
package apitest

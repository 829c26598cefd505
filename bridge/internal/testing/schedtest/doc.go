// Package schedtest runs a cluster that schedules pods with DRA claims
// for tests: an apitest server, then kube-controller-manager (its
// resourceclaim controller alone, which makes a pod's claims from their
// templates; StartWith runs others besides, such as the device taint
// eviction controller) and kube-scheduler over it, as its admin, stopped
// with the test. No kubelet runs: a test makes its Nodes ready with
// CreateNode and plays the kubelet's side itself.
//
// KUBE_SCHEDULER and KUBE_CONTROLLER_MANAGER name the programs (the
// Makefile builds them into bin/). Where either is empty, Start fails the
// test when the CI environment variable is set and skips it otherwise,
// before it starts anything.
//
// The cluster also takes what the shipped DRA examples,
// bridge/deploy/examples/dra, declare: CreateExamples creates their
// DeviceClasses and ResourceClaimTemplates as they are.
package schedtest

// Package discovery finds what the node's CDI plugins offer: it loads every
// drop-in, runs INFO (protocol 0.1.0, for the device inventory) and groups
// the devices into pools, one per drop-in and resource-spec. The bridge
// turns each pool into a Configuration-level resource and each device into
// an Instance.
//
// Discovery runs at start, on a period and whenever the drop-in folder
// changes. A plugin that fails INFO does not make its devices vanish (that
// would withdraw resources from the kubelet on a transient error): they are
// kept from the previous run and reported unhealthy until INFO succeeds.
package discovery

// Package metrics holds the bridge's Prometheus collectors, on a registry
// of their own (never the library's global one), and serves them. The
// bridge's packages report through plain observer functions
// (node.Config.OnAllocate, OnRegister and OnDeviceEvent,
// discovery.Discoverer.OnExec, drafront.Config.OnClaim) and gauge
// sources (node.Node.Usage, drafront.FrontEnd.Published,
// discovery.Discoverer.Skipped and SkippedDevices, the Instance store's
// staleness), which the command wires to the methods here. Only node and
// drafront import this package, for the PoolUsage and DRAPool their
// sources return; the others do not know it.
//
// Every name starts with cdi_bridge_:
//
//   - allocations_total{resource,level,result}: Allocate calls; level is
//     "instance" or "configuration", result "ok", "denied" (refused
//     before any slot was claimed: the Configuration-level rules found no
//     distinct devices, or an id is unknown) or "failed" (a claim or an
//     ADD failed and the call was rolled back). Denials are this
//     counter's result label rather than a counter of their own, so that
//     a denial rate is one query over one metric.
//   - plugin_exec_duration_seconds{plugin,command,result}: every run of a
//     plugin binary (VERSION, INFO, ADD, DEL, ...), from 1 ms to 30 s;
//     result "ok", "error" or "failed".
//   - registrations_total{resource,result}: kubelet registration
//     attempts, result "ok" or "failed".
//   - devices{resource,health} and slots{resource,state}: each pool's
//     devices and usage slots on this node, read at each scrape.
//   - dropins_skipped: drop-ins, or pools of one, that the last
//     discovery did not serve.
//   - devices_skipped{drop_in,reason}: devices a drop-in's plugin found
//     but did not offer at its last INFO, by the plugin's reason
//     (SPEC.md's skipped_devices), read at each scrape.
//   - store_stale_seconds: how long the Instance store's view has been
//     behind the API server; 0 when current.
//   - build_info{version}: always 1.
//   - device_event_to_kubelet_seconds: from a device directory event
//     (a node plugged or unplugged) until each device list it changed
//     was sent to the kubelet, 50 ms to a minute.
//   - dra_prepare_duration_seconds{pool} and
//     dra_unprepare_duration_seconds{pool}: every Prepare and Unprepare
//     of a claim by the DRA front end, failed ones included, 1 ms to
//     30 s, by the bridge pool of the claim's devices (a claim of two
//     pools counts in both; "unknown" where the pool cannot be told).
//   - dra_prepare_failures_total{pool,reason} and
//     dra_unprepare_failures_total{pool,reason}: those that failed, by
//     dradevices.Reason (not-discovered, not-allocatable,
//     plugin-timeout, plugin-not-run, plugin-bad-output,
//     plugin-code-<n>, file-system, canceled, other).
//   - dra_devices{pool,state}: each DRA pool's devices in the node's
//     ResourceSlices, state "published" (all) or "tainted" (unhealthy,
//     tainted), read at each scrape.
//
// plus the Go runtime's and the process's standard collectors.
package metrics

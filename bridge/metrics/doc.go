// Package metrics holds the bridge's Prometheus collectors, on a registry
// of their own (never the library's global one), and serves them. The
// bridge's packages do not import it: they take plain observer functions
// (node.Config.OnAllocate, OnRegister and OnDeviceEvent,
// discovery.Discoverer.OnExec), which the command wires to the methods
// here.
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
//   - plugin_exec_duration_seconds{plugin,command}: every run of a plugin
//     binary (VERSION, INFO, ADD, DEL, ...), from 1 ms to 30 s.
//   - registrations_total{resource,result}: kubelet registration
//     attempts, result "ok" or "failed".
//   - device_event_to_kubelet_seconds: from a device directory event
//     (a node plugged or unplugged) until each device list it changed
//     was sent to the kubelet, 50 ms to a minute.
//
// plus the Go runtime's and the process's standard collectors.
package metrics

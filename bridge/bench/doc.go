// Package bench holds the kubelet bridge's benchmarks, in its tests
// alone. BenchmarkBridge measures, every figure against a floor measured
// in the same run on the same machine:
//
//   - Allocate latency, from the kubelet side's gRPC call to its
//     response, at the Instance level and the Configuration level,
//     through a node.Node in this process (the cdi-bridge binary's own
//     node, with the local store in a file) over real unix sockets and the
//     real generic-tty plugin on the fixture host, against that plugin's
//     ADD exec alone (same binary, drop-in, request-id and device):
//     medians, p99 and what the bridge adds at the median, with the
//     store's claim alone beside them, the part of that which is the
//     store's;
//   - propagation, for the same calls: from the response until the update
//     reached every affected ListAndWatch stream (the device's
//     Instance-level stream and the pool's);
//   - start-up and memory of the cdi-bridge binary serving 200 endpoints
//     (the endpoint plugin, probe off) of capacity 4, that is 201 device
//     plugins: from the process start until every plugin is registered
//     and has sent its complete list, then VmRSS and VmHWM from
//     /proc/<pid>/status, against the same binary serving one endpoint;
//   - hotplug (hotplug_test.go, idle_test.go): 100 terminals (empty files under a
//     root of the rig's own) made at once, then removed at once, under a
//     node.Node with the real inotify watch and a discovery period of an
//     hour: the INFO runs of the drop-in each burst cost (goal at most 2)
//     and the time from the first change until the kubelet side had
//     every list it changed, the pool's and each device's own (goal under
//     a second); then the CPU the cdi-bridge binary serving 100 terminals
//     uses while nothing changes, with --watch-devices=false (polling
//     only, the floor) and true, twice each in turn, over -idle (30 s, a
//     shortened minute; goal: no more than the floor). -only=hotplug
//     runs it alone;
//   - the Kubernetes store (a real etcd and kube-apiserver, as
//     bridge/internal/testing/apitest runs them for the tests): the same Allocate
//     latencies against the local store's, its API writes per allocation,
//     and the conflicts when three or four nodes race for the last slot.
//
// Each Allocate is undone before the next, untimed, by the node's own slot
// reclaim (node.Reclaimer with no grace and a kubelet whose containers
// hold nothing): DEL on the plugin, then the release in the store, as a
// slot whose container is gone gets. The next call waits until every
// stream lists everything free again. The kubelet side is this package's
// own: like bridge/internal/testing/kubelettest, but it keeps when each list
// arrived, which propagation and start-up are measured from.
//
// The Allocate subjects are measured interleaved, one call of each in
// turn, so that a machine that slows down or speeds up during the run
// shifts every row alike instead of biasing the ratios; the two bridge
// sizes are started in turn for the same reason.
//
// `make bench` runs BenchmarkBridge after the plugins' bench, as
//
//	go test -run '^$' -bench '^BenchmarkBridge$' -benchtime 1x ./bridge/bench
//
// with -rounds, -devices, -capacity, -starts, -race-rounds, -kube and
// -idle to size it, and -only=hotplug to run that part alone (flags of
// the test binary: BENCH="-only=hotplug" for make);
// progress goes to stderr, the tables to stdout. Without etcd
// (Debian's etcd-server) the kube store's parts are reported as skipped,
// unless the CI environment variable is set, when the run fails. Then
// BenchmarkAllocate/subject=<subject> times the same calls on the local
// store, one subject after another, reporting the calls' own times
// (ns/op, p50-ms, p99-ms) without the undo each iteration also runs;
// benchstat -col /subject sets them against the ADD alone.
//
// BenchmarkDRAPublish measures the DRA front end's ResourceSlice
// publishing against an etcd and kube-apiserver of its own: a discovery
// of -dra-devices devices (1,000) in one pool, through
// dradevices.Resources, published by the library's ResourceSlice
// controller with a Node owner as the bridge runs it (dra.NodeSlices,
// started with the subject, just before the first publish; on the fresh
// Node of each round the first slices are created with the typed client
// ahead of the controller, which is started after them and adopts them);
// then republished after one device's property changes, and
// after the same device turns unhealthy (tainted in its slice). The floor, interleaved with it step by step, is the same
// slices written with the typed client alone: a create each, then one
// update of the slice that holds the changed device. Each step is timed
// from the call until a watch of the node's slices shows the pool's
// newest generation complete; the publisher's requests, by verb, and the
// bytes it sent and received are counted at its client's transport.
// Medians of -dra-rounds rounds (5), each subject on a Node of its own.
// Its verdict column judges the target that a change to one device
// rewrites one slice. Its first publish is a fresh node's without the
// bridge's start around it (BenchmarkDRAStart has that).
//
// BenchmarkDRAStart measures the first publish as the bridge makes it:
// the cdi-bridge binary with --dra-pools over the real generic-tty plugin
// and -dra-devices terminals (empty files under a root of its own), the
// kube store, against an etcd and kube-apiserver of its own, -dra-rounds
// starts, each on a Node of its own. From the bridge's JSON log and a
// watch of the node's slices it reports the time from the first
// discovery's hand-off to the DRA front end until its slices are in the
// API (what a node's devices wait), against the same slices created with
// the typed client in the same round (the floor, before or after the
// bridge in turn), and the whole start from the slice controller's start,
// part by part. make bench runs both, as
//
//	go test -run '^$' -bench '^BenchmarkDRA(Publish|Start)$' -benchtime 1x ./bridge/bench
//
// Targets (the bridge adds at most 2 ms at the median; propagation under
// 50 ms; up to 5,000 devices serving within 10 s in under 150 MB; one API
// write per allocation) are judged in the tables' verdict columns, not by failing,
// because a slow or noisy machine should not turn a measurement into a
// failure. Two winners of one slot, an allocation left after every undo,
// or any call that fails unexpectedly fails the benchmark.
package bench

// Package node runs a real Kubernetes node on this machine and cdi-bridge
// beside it, and checks that pods get their devices through the whole real
// path: kubelet device manager -> cdi-bridge -> plugin ADD -> CRI ->
// containerd (CDI on) -> runc -> the container's /dev and environment.
//
// The node is etcd and a kube-apiserver (bridge/internal/testing/apitest, with the
// Node authorizer and the NodeRestriction admission plugin), containerd 2
// with runc, and a kubelet, all built from their published sources (`make
// node-bins`, `make kube-apiserver`; `make e2e` builds them and runs this
// test, naming them in KUBE_APISERVER, KUBELET, KUBE_SCHEDULER,
// KUBE_CONTROLLER_MANAGER and CONTAINERD_BIN_DIR). Without root the test
// skips; with the CI environment variable set, a missing program fails it.
//
// The tests each run a node of their own, one after the other in the
// same namespaces:
//
//   - TestNode runs cdi-bridge as a process with the test's drop-ins
//     ("The bridge" below), and pods that name their node: no scheduler,
//     no controller-manager, the default ServiceAccount made by the test.
//     It covers reclaim and restarts of the kubelet and the bridge.
//   - TestFreedAtOnce runs the bridge as TestNode does, with a
//     --reclaim-grace of 10 minutes, and deletes a pod that holds a
//     terminal: the terminal is back in the pool's resource within
//     seconds, its pod's end seen from PodResources and confirmed by the
//     API server, not after the grace. TestFreedRecreatedPodKubeletRestart
//     deletes a pod and runs one of the same name, which is given the
//     freed terminal, then restarts the kubelet: the new pod keeps it.
//   - TestDaemonSet installs the bridge as an operator does: the project's
//     image (bridge/deploy/image, for this machine's architecture) imported
//     into containerd, the shipped DaemonSet created, its pod made by
//     kube-controller-manager's DaemonSet controller and bound by
//     kube-scheduler. It changes the DaemonSet only where this node is not
//     a cluster: no pod network and no kube-proxy, so the pod uses the
//     host's network and names the API server by its address
//     (daemonSetOnTestNode). The pod's host paths /opt/cdi, /etc/cdi,
//     /var/lib/cdi, /var/run/cdi and /var/lib/kubelet are directories of
//     the test's own. It checks what the init step installed, that the
//     bridge runs with no capabilities and a read-only /dev and /sys, that
//     the default install offers no terminal and no camera, that a
//     workload gets a terminal once a drop-in offers one, and a rolling
//     update of the DaemonSet under that workload.
//   - TestDRA runs the bridge as a process, as TestNode does, with
//     --dra-pools=tty-generic: the terminals are served through DRA, the
//     cameras still by the device plugins. kube-controller-manager's claim
//     controller makes the pods' claims from the example templates
//     (bridge/deploy/examples/dra, applied with their DeviceClasses and
//     RBAC), kube-scheduler allocates them from the bridge's
//     ResourceSlices, and the kubelet has the bridge prepare them. It
//     covers unprepare on a pod's deletion, restarts of the kubelet and
//     the bridge, and a pod that asks for the pool's device-plugin
//     resource the old way (an extended resource, KEP-5004). Its kubelet
//     directory and CDI spec directory are fresh.
//   - TestDRACheckpoint runs a node as TestDRA does and loses the bridge's
//     DRA checkpoint (cut short, then deleted) under a running pod while
//     another pod's is deleted: the bridge is ready again, the running pod
//     keeps its terminals, the deleted one's claim is unprepared, the next
//     claim gets free terminals only.
//   - TestDRAMove moves the terminals' pool between the device plugins
//     and DRA under running pods, both ways, by restarting the bridge
//     with another --dra-pools: no terminal is offered twice.
//   - TestDRAUpstream runs a node as TestDRA does and holds the bridge to
//     the checks of upstream's DRA node tests, which only their own test
//     driver can run: a pod created while the kubelet is down runs; a
//     Prepare that fails keeps the pod pending, with the kubelet's event,
//     until it succeeds; a pod deleted while the kubelet is down, and a
//     force-deleted one, are unprepared; a new claim of an old claim's
//     name waits for the old one's Unprepare. The failures are the
//     terminals' plugin's own: its drop-in runs it behind a gate, a
//     script whose files make ADD or DEL fail or hold INFO
//     (dragate_test.go). Once the failure is lifted the test annotates
//     the waiting pod, as an operator would, which the kubelet syncs at
//     once, rather than wait a minute or more for the kubelet's resync.
//   - TestDRARollingUpdate runs a node as TestDRA does and updates the
//     bridge as the chart's DaemonSet does with dra.pools: a second
//     bridge started with a new pod UID (--pod-uid) beside the first,
//     which stops once the second is ready, while pods with claims run
//     and new ones are prepared.
//   - TestDRAHealth runs a node as TestDRA does, then adds a drop-in
//     whose one terminal is a copy (mknod) of a real one under the test's
//     root, served through DRA, and a pod whose claim holds it: removed,
//     the device shows Unhealthy in the pod's allocatedResourcesStatus
//     within 2 s, by the CDI name the bridge's prepare returned, and
//     Healthy again once it is back; the bridge's /metrics counts the
//     claim and the pool's devices.
//   - TestBrokers runs a node as TestDRA does, with the Job, Deployment,
//     ReplicaSet and garbage-collector controllers besides and the bridge
//     acting on Brokers (bridge/broker) in the pods' namespace, holding the
//     RBAC of bridge/deploy/examples/brokers: a Job per camera, each pod
//     seeing its camera's variables alone; not run again by a new leader,
//     run again when the Broker changes; a camera removed from the drop-in
//     losing its Job after the grace and getting it back; a Deployment of
//     two pods per camera, the bridge killed as the first Deployment shows
//     (nothing made twice), a camera removed under its Deployment's pods,
//     which hold it; one pod over both cameras; a Job per terminal through
//     DRA, each seeing its terminal alone. Its pods run podcheck from a
//     template, reporting into a directory named after the pod.
//
// BenchmarkPodStart runs a node as TestDRA does and times pods from their
// creation to their container running, through the device plugins and
// then through DRA, for the same terminals.
//
// # Namespaces
//
// The test needs root, and leaves the machine as it found it. TestMain
// re-executes the test binary in new mount, network and PID namespaces
// (reexec.go, mounts.go):
//
//   - mount: / becomes private; /run, /var/lib and /var/log are overlaid,
//     so the node sees the host's files while everything it writes (the
//     kubelet's /var/lib/kubelet, CDI spec files in /var/run/cdi,
//     containerd's shim sockets in /run/containerd, /var/log/pods) lands in
//     the test's directory; /var/lib/kubelet is a private directory on a
//     real file system (the kubelet measures it); the /proc/sys files the
//     kubelet checks (vm.overcommit_memory, kernel.panic, ...) are covered
//     by files holding the values it wants, so it changes no kernel
//     setting (and, with protectKernelDefaults, would fail rather than
//     change one).
//   - network: only lo, up, with the node's IP 10.254.254.1/32 (the kubelet
//     refuses a loopback node IP). Pods use the host network, which is this
//     namespace; CNI sees a loopback-only configuration.
//   - PID: the test binary is the namespace's init, so when it exits the
//     kernel kills whatever the node left running (containerd's shims, the
//     containers), and nothing outlives the test.
//
// Cgroups are the one thing namespaces do not make private. The kubelet
// is given a cgroup root of its own (one directory per hierarchy, made by
// the outer test process), and the outer process removes that whole tree
// once the namespaces are gone.
//
// # The bridge
//
// In TestNode, cdi-bridge runs as a process in the node's namespaces with
// the flags of bridge/deploy/daemonset.yaml, and quick reclaim. Its
// identity is the manifests' own: the cdi-bridge ServiceAccount with
// bridge/deploy/rbac.yaml applied unchanged (as kustomize renders it),
// authenticating with a token the API server issues for that
// ServiceAccount, so the test proves the shipped RBAC suffices. In
// TestDaemonSet the pod's projected token is that identity. In TestDRA
// the bridge has the DRA front end's ClusterRole of
// bridge/deploy/examples/dra/rbac.yaml besides, and no more; in every
// test, a line of the bridge's log in which the API server refused it
// something fails the test.
//
// Its drop-ins are made by the test: generic-tty over this machine's real
// /dev/ttyN (a few of the highest-numbered ones) and endpoint with two
// network cameras, each with a state directory of the test's own.
//
// # Images
//
// One static program, internal/podcheck, is the whole image of the test's
// pods, built and imported with ctr: it is the sandbox ("pause") image and
// every pod's workload, which writes what it sees (device nodes under
// /dev, the environment) to a host directory. TestDaemonSet imports the
// bridge's image as well, under both its names: the manifests' and the
// build's version tag, to which the rolling update moves.
//
// # Checks
//
// What each pod must see is taken from the real components, not from the
// test's expectations: the kubelet's PodResources API says which device
// ids the pod's container holds, the Instance objects say which slot of
// which device each id is, and the plugins' LIST says what ADD returned for
// that slot (device nodes, environment). In TestDRA the claim's
// allocation says which devices of the bridge's ResourceSlices the pod
// has, the ADDs' request-ids are <claim UID>-<n>, and the plugins' LIST,
// the bridge's checkpoint and the claim's CDI spec file must all name
// them.
package node

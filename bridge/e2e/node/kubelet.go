package node

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// kubeletHealthz is the kubelet's healthz endpoint (its default port).
	kubeletHealthz = "http://127.0.0.1:10248/healthz"
	// nodeReadyWait bounds the wait for the Node to be Ready; it takes a
	// second or two here.
	nodeReadyWait = 2 * time.Minute
)

// kubeletConfig is the node's KubeletConfiguration:
//   - cgroupfs (no systemd here), and cgroup v1 allowed (this machine's);
//     the pods' cgroups go under a root of the test's own (cgroups.go)
//   - no swap check, no iptables chains (no kube-proxy, host network only)
//   - protectKernelDefaults: the kernel settings it wants are what the
//     node's /proc/sys shows (mounts.go); were one not, the kubelet would
//     fail rather than change the machine's
//   - eviction and image garbage collection out of the way: the host's
//     disk and memory are not the test's to judge
//   - its own port open to anyone (test only: nothing outside the
//     network namespace can reach it)
//   - the FlexVolume plugin directory in the test's (the default,
//     /usr/libexec/kubernetes/kubelet-plugins/volume/exec, is made at start)
//   - node status every 2 seconds, not 10: the test waits for the
//     bridge's resources to show in the Node's allocatable
var kubeletConfig = template.Must(template.New("kubelet.yaml").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://{{.Socket}}
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
volumePluginDir: {{.VolumePluginDir}}
nodeStatusUpdateFrequency: 2s
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: true
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`))

// StartKubelet writes the kubelet's configuration and starts it as the
// node name with kubeconfig (the node's credentials), then waits until the
// Node is Ready.
func StartKubelet(t testing.TB, l Layout, client kubernetes.Interface, name, kubeconfig string) *Proc {
	t.Helper()
	config := l.Path("kubelet.yaml")
	data := map[string]string{"Socket": containerdSocket, "CgroupRoot": l.CgroupRoot, "VolumePluginDir": l.Path("volume-plugins")}
	if err := writeTemplate(config, kubeletConfig, data); err != nil {
		t.Fatal(err)
	}
	p := StartProc(t, l, "kubelet", nil, l.Programs.Kubelet,
		"--config="+config, "--kubeconfig="+kubeconfig,
		"--hostname-override="+name, "--node-ip="+NodeIP, "--v=2")
	if err := WaitNodeReady(t.Context(), client, name, p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// WaitNodeReady waits until the kubelet answers its healthz and the Node
// is Ready with a heartbeat after since (after a restart: from the new
// kubelet).
func WaitNodeReady(ctx context.Context, client kubernetes.Interface, name string, kubelet *Proc, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, nodeReadyWait)
	defer cancel()
	last := "no Node object yet"
	for ctx.Err() == nil {
		if exited, how := kubelet.Exited(); exited {
			return fmt.Errorf("the kubelet exited (%s); its log ends:\n%s", how, kubelet.Tail(logTail))
		}
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			ready := readyCondition(node)
			last = fmt.Sprintf("Ready=%s (%s: %s), heartbeat %v", ready.Status, ready.Reason, ready.Message, ready.LastHeartbeatTime)
			if ready.Status == corev1.ConditionTrue && !ready.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)) && healthy(ctx) {
				return nil
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready within %v: last seen %s; the kubelet's log ends:\n%s",
		name, nodeReadyWait, last, kubelet.Tail(logTail))
}

func readyCondition(node *corev1.Node) corev1.NodeCondition {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NoCondition"}
}

// healthy reports whether the kubelet's healthz answers ok.
func healthy(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kubeletHealthz, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kubeletDir is the kubelet's root directory, the default, a private
// directory in the node's mount namespace (mounts.go).
const kubeletDir = "/var/lib/kubelet"

// podResourcesSocket is the kubelet's PodResources API at its standard
// path, which the DaemonSet gives the bridge too.
var podResourcesSocket = filepath.Join(kubeletDir, "pod-resources", "kubelet.sock")

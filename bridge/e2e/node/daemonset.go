package node

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// bridgeImageName is the image the manifests name: the kustomization's
// images entry, and `make image`'s default.
const bridgeImageName = "cdi-bridge:dev"

// The DaemonSet's host paths, as its pod sees them and the node test
// fills them: the plugins and drop-ins the init step installs, the
// plugins' state.
const (
	hostPluginDir = "/opt/cdi/bin"
	hostConfDir   = "/etc/cdi"
	hostStateDir  = "/var/lib/cdi"
)

// podWait bounds the wait for the DaemonSet's pod to be Ready: the
// controller-manager makes it, the scheduler binds it, the kubelet runs
// the init step and the bridge, whose readiness probe passes once its
// first discovery is published (about 25 seconds here).
const podWait = 3 * time.Minute

// StartDaemonSetNode starts a node whose bridge is the shipped
// DaemonSet's pod: the controller-manager makes it, the scheduler places
// it, the kubelet runs it from the project's image. The test changes the
// DaemonSet only where this node is not a cluster (daemonSetOnTestNode).
func StartDaemonSetNode(t *testing.T, l Layout) *Node {
	t.Helper()
	n := &Node{Layout: l, ConfDir: hostConfDir, PluginDir: hostPluginDir}
	if err := privateHostDirs(t, l); err != nil {
		t.Fatal(err)
	}
	timed(t, "etcd and kube-apiserver", func() { n.Cluster = StartCluster(t, l, Name) })
	timed(t, "kube-controller-manager and kube-scheduler", func() { startControllers(t, l, n.Cluster, daemonSetControllers) })
	n.startKubelet(t)
	if out, err := n.Containerd.Ctr(t.Context(), "images", "import", "--snapshotter", n.Containerd.Snapshotter,
		"--platform", "linux/"+runtime.GOARCH, filepath.Join(l.Bin, bridgeImageTar)); err != nil {
		t.Fatalf("importing the bridge's image: %v\n%s", err, out)
	}
	timed(t, "the DaemonSet's pod (to Ready)", func() {
		if err := n.Cluster.createDaemonSet(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		// Before the kubelet stops (cleanups run last first): the pod
		// must not outlive its node.
		t.Cleanup(func() {
			if err := n.removeDaemonSet(context.Background()); err != nil {
				t.Error(err)
			}
		})
		if _, err := n.WaitBridgePod(t.Context(), ""); err != nil {
			t.Fatal(err)
		}
	})
	return n
}

// privateHostDirs gives each host path the pod writes or the test fills
// a directory of the test's own, so that nothing lands on the machine:
// /etc and /opt are overlaid (their cdi directories need not exist on
// the host), then a fresh directory is bound over each path. All of it
// is undone when the test ends.
func privateHostDirs(t *testing.T, l Layout) error {
	var mounted []string
	t.Cleanup(func() {
		for _, dir := range slices.Backward(mounted) {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", dir, err)
			}
		}
	})
	for _, dir := range []string{"/etc", "/opt"} {
		if _, err := overlay(l, dir); err != nil {
			return fmt.Errorf("%w: overlaying %s: %w", ErrUnavailable, dir, err)
		}
		mounted = append(mounted, dir)
	}
	for _, dir := range []string{hostPluginDir, hostConfDir, hostStateDir, cdiSpecDir, kubeletDir} {
		if err := bindDir(l.Path("host", strings.ReplaceAll(strings.Trim(dir, "/"), "/", "-")), dir); err != nil {
			return err
		}
		mounted = append(mounted, dir)
	}
	return nil
}

// daemonSetControllers are the controllers a DaemonSet's pod needs: the
// DaemonSet controller makes the pod, the service account and root CA
// publishers give its namespace what its projected token volume mounts,
// the node lifecycle controller lifts the not-ready taint.
const daemonSetControllers = "daemonset-controller,root-ca-certificate-publisher-controller,serviceaccount-controller,node-lifecycle-controller"

// startControllers starts kube-controller-manager with controllers (its
// --controllers) and kube-scheduler, which binds pods to the node, with
// the admin's credentials.
func startControllers(t testing.TB, l Layout, c *Cluster, controllers string) {
	t.Helper()
	admin := c.Env.Kubeconfig(t, apitest.AdminUser)
	ca := l.Path("apiserver-ca.crt")
	if err := os.WriteFile(ca, c.Env.Config.CAData, 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--kubeconfig=" + admin, "--authentication-kubeconfig=" + admin,
		"--authorization-kubeconfig=" + admin, "--leader-elect=false", "--bind-address=127.0.0.1"}
	StartProc(t, l, "kube-controller-manager", nil, append([]string{l.Programs.ControllerManager,
		"--controllers=" + controllers,
		"--root-ca-file=" + ca}, common...)...)
	StartProc(t, l, "kube-scheduler", nil, append([]string{l.Programs.Scheduler}, common...)...)
}

// createDaemonSet creates the kustomization's DaemonSet, with its images
// entry applied, as changed for the test node.
func (c *Cluster) createDaemonSet(ctx context.Context, l Layout) error {
	dir := filepath.Join(l.Repo, deployDir)
	k, err := readKustomization(dir)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "daemonset.yaml"))
	if err != nil {
		return err
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		return fmt.Errorf("daemonset.yaml: %w", err)
	}
	ds.Namespace = c.Namespace
	k.setImages(&ds.Spec.Template.Spec)
	if err := daemonSetOnTestNode(&ds, c.Env.Config.Host); err != nil {
		return err
	}
	_, err = c.Client.AppsV1().DaemonSets(c.Namespace).Create(ctx, &ds, metav1.CreateOptions{})
	return err
}

// daemonSetOnTestNode changes what this node lacks of a cluster, and
// nothing else. It has no pod network (its CNI is loopback only) and no
// kube-proxy: the pod uses the host's network, which is the node's
// namespace, so that the kubelet can probe it and it can reach the API
// server; and the API server is named by its address, not by the
// kubernetes Service's cluster IP, which nothing routes here (explicit
// variables win over the ones the kubelet sets for that Service).
func daemonSetOnTestNode(ds *appsv1.DaemonSet, apiserver string) error {
	u, err := url.Parse(apiserver)
	if err != nil {
		return err
	}
	pod := &ds.Spec.Template.Spec
	pod.HostNetwork = true
	i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == "bridge" })
	if i < 0 {
		return fmt.Errorf("the DaemonSet has no container named bridge")
	}
	pod.Containers[i].Env = append(pod.Containers[i].Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: u.Hostname()},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: u.Port()})
	return nil
}

// removeDaemonSet deletes the DaemonSet, leaving its pod (no garbage
// collector runs here to delete it), then the pod, and waits until the
// kubelet has stopped it: a bridge left running would hold the node's
// metrics port, and its sockets, into the next test.
func (n *Node) removeDaemonSet(ctx context.Context) error {
	orphan := metav1.DeletePropagationOrphan
	ds, err := n.daemonSet(ctx)
	if err != nil {
		return err
	}
	err = n.Cluster.Client.AppsV1().DaemonSets(n.Cluster.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{PropagationPolicy: &orphan})
	if err != nil {
		return err
	}
	pods, err := n.Cluster.Client.CoreV1().Pods(n.Cluster.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if err := deletePod(ctx, n.Cluster.Client, n.Cluster.Namespace, p.Name); err != nil {
			return err
		}
	}
	return nil
}

// SetBridgeImage sets the image of every container of the DaemonSet's
// pod, which starts a rolling update.
func (n *Node) SetBridgeImage(ctx context.Context, image string) error {
	dsc := n.Cluster.Client.AppsV1().DaemonSets(n.Cluster.Namespace)
	ds, err := n.daemonSet(ctx)
	if err != nil {
		return err
	}
	for i := range ds.Spec.Template.Spec.InitContainers {
		ds.Spec.Template.Spec.InitContainers[i].Image = image
	}
	for i := range ds.Spec.Template.Spec.Containers {
		ds.Spec.Template.Spec.Containers[i].Image = image
	}
	_, err = dsc.Update(ctx, ds, metav1.UpdateOptions{})
	return err
}

// daemonSet is the bridge's one DaemonSet.
func (n *Node) daemonSet(ctx context.Context) (*appsv1.DaemonSet, error) {
	list, err := n.Cluster.Client.AppsV1().DaemonSets(n.Cluster.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d DaemonSets in %s, want the bridge's", len(list.Items), n.Cluster.Namespace)
	}
	return &list.Items[0], nil
}

// WaitBridgePod waits until the DaemonSet's pod is Ready by its own
// probes and is the only one, and not the pod whose UID is replaced (a
// rolling update's old pod), and returns it.
func (n *Node) WaitBridgePod(ctx context.Context, replaced string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, podWait)
	defer cancel()
	last := "no pod"
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		pods, err := n.Cluster.Client.CoreV1().Pods(n.Cluster.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			continue
		}
		if len(pods.Items) != 1 {
			last = fmt.Sprintf("%d pods", len(pods.Items))
			continue
		}
		p := &pods.Items[0]
		last = describePod(n.Cluster.Client, p)
		if string(p.UID) != replaced && podReady(p) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("the DaemonSet's pod not Ready within %v; last seen:\n%s", podWait, last)
}

// podReady reports whether the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// kustomization is what the test reads of kustomization.yaml.
type kustomization struct {
	Namespace string   `json:"namespace"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

func readKustomization(dir string) (kustomization, error) {
	var k kustomization
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return k, err
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return k, fmt.Errorf("kustomization.yaml: %w", err)
	}
	return k, nil
}

// setImages renames the pod's images as the images entries say, as
// kustomize does.
func (k kustomization) setImages(pod *corev1.PodSpec) {
	rename := func(c *corev1.Container) {
		name, tag, _ := strings.Cut(c.Image, ":")
		for _, e := range k.Images {
			if e.Name == name {
				c.Image = cmp.Or(e.NewName, name) + ":" + cmp.Or(e.NewTag, tag)
			}
		}
	}
	for i := range pod.InitContainers {
		rename(&pod.InitContainers[i])
	}
	for i := range pod.Containers {
		rename(&pod.Containers[i])
	}
}

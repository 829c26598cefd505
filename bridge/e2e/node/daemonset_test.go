package node

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// TestDaemonSet installs the bridge as an operator does: the project's
// image imported into the node's containerd, the shipped manifests
// applied, the pod made by the DaemonSet controller, placed by the
// scheduler and Ready by its own probes. It checks what the default
// install put on the host and offers, the pod's privileges, a workload
// served through it, and a rolling update under that workload.
func TestDaemonSet(t *testing.T) {
	l := requireNode(t).Sub("daemonset")
	n := StartDaemonSetNode(t, l)
	t.Run("the init step installs every plugin and the safe drop-ins only", func(t *testing.T) {
		checkInstalled(t, l.Repo)
	})
	t.Run("the bridge has no capabilities and sees /dev and /sys read-only", func(t *testing.T) {
		checkConfined(t)
	})
	t.Run("the default install offers no camera and no terminal", func(t *testing.T) {
		n.Baseline = checkDefaultOffer(t, n)
	})
	var held *Pod
	if !t.Run("a workload gets a terminal that an operator's drop-in offers", func(t *testing.T) {
		held = runOperatorTerminal(t, n)
	}) {
		t.Fatal("not updating the DaemonSet: it needs the workload above running")
	}
	t.Run("a rolling update keeps the workload's slot and serves new ones", func(t *testing.T) {
		testRollingUpdate(t, n, held)
	})
	t.Run("the bridge's identity is refused nothing", func(t *testing.T) {
		checkPodNotForbidden(t, n.Cluster.Namespace)
	})
}

// checkInstalled checks the host directories the init step wrote: every
// plugin of the repository, each answering VERSION, and of the default
// drop-ins only those that offer real hardware: no virtual consoles, no
// example cameras.
func checkInstalled(t *testing.T, repo string) {
	mains, err := filepath.Glob(filepath.Join(repo, "plugins", "*", "main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no plugins under %s: %v", repo, err)
	}
	for _, m := range mains {
		plugin := filepath.Join(hostPluginDir, filepath.Base(filepath.Dir(m)))
		cmd := exec.CommandContext(t.Context(), plugin)
		cmd.Env = []string{"CDI_COMMAND=VERSION"}
		if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "supportedVersions") {
			t.Errorf("%s VERSION: %v: %s", plugin, err, out)
		}
	}
	var got []string
	err = filepath.WalkDir(hostConfDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(hostConfDir, path)
			got = append(got, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".cdi-install-defaults", "dev.d/generic.conf", "gpu.d/drm.conf"}
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %v, want %v", hostConfDir, got, want)
	}
}

// checkConfined finds the pod's bridge among the node's processes (the
// test is their PID namespace's init) and checks what the kernel says
// of it: an empty effective capability set, and /dev and /sys, with
// every mount below them, read-only.
func checkConfined(t *testing.T) {
	pid, err := findProcess("/usr/local/bin/cdi-bridge")
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			t.Logf("the bridge's CapEff: %s", strings.TrimSpace(v))
			if strings.Trim(strings.TrimSpace(v), "0") != "" {
				t.Errorf("the bridge's effective capabilities are %s, want none", strings.TrimSpace(v))
			}
		}
	}
	points, err := mountPoints(pid, "/dev", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mounts at or below /dev and /sys in the bridge's mount namespace: %v", points)
	for _, top := range []string{"/dev", "/sys"} {
		if !slices.Contains(points, top) {
			t.Errorf("%s is not a mount of its own in the bridge's mount namespace", top)
		}
	}
	for _, p := range points {
		if err := checkMountReadOnly(pid, p); err != nil {
			t.Error(err)
		}
	}
}

// checkMountReadOnly fails unless the file system the process sees at
// point is mounted read-only, or is its pod's own /dev/shm: the runtime
// mounts a tmpfs of the pod's there, as in every pod, over the host's.
// Through the process's root the path resolves as the process resolves
// it: a mount hidden by a later one is judged by the one it sees there.
func checkMountReadOnly(pid, point string) error {
	seen := filepath.Join("/proc", pid, "root", point)
	var st unix.Statfs_t
	if err := unix.Statfs(seen, &st); err != nil {
		return fmt.Errorf("statfs %s as the bridge sees it: %w", point, err)
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		return nil
	}
	if point == "/dev/shm" {
		var pod, host unix.Stat_t
		if err := unix.Stat(seen, &pod); err != nil {
			return err
		}
		if err := unix.Stat(point, &host); err != nil {
			return err
		}
		if pod.Dev != host.Dev {
			return nil
		}
	}
	return fmt.Errorf("%s is writable for the bridge (mount flags %#x)", point, st.Flags)
}

// mountPoints returns the distinct mount points at or below tops in the
// mount namespace of process pid, from its mountinfo.
func mountPoints(pid string, tops ...string) ([]string, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mount-point options ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := fields[4]
		under := slices.ContainsFunc(tops, func(top string) bool { return p == top || strings.HasPrefix(p, top+"/") })
		if under && !slices.Contains(points, p) {
			points = append(points, p)
		}
	}
	return points, sc.Err()
}

// findProcess returns the pid of the one process whose argv[0] is argv0.
func findProcess(argv0 string) (string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return "", err
	}
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Split(string(cmdline), "\x00")[0] == argv0 {
			found = append(found, e.Name())
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%d processes run %s (%v), want one", len(found), argv0, found)
	}
	return found[0], nil
}

// checkDefaultOffer checks that the default install offers the kubelet no
// terminal and no camera (this node has no camera, and its virtual
// consoles are not for pods), and that no Instance names one. It returns
// what is offered, by resource, for the checks that follow.
func checkDefaultOffer(t *testing.T, n *Node) map[string]int64 {
	resp, err := n.PodResources.GetAllocatableResources(t.Context(), &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	offered := map[string]int64{}
	for _, d := range resp.Devices {
		if strings.HasPrefix(d.ResourceName, domain+"/") {
			offered[d.ResourceName] += int64(len(d.DeviceIds))
		}
	}
	t.Logf("the default install offers %v", offered)
	for r := range offered {
		if strings.HasPrefix(r, domain+"/tty-") || strings.HasPrefix(r, domain+"/camera-") {
			t.Errorf("the default install offers %s", r)
		}
	}
	insts, err := listInstances(t.Context(), n.Cluster.Dynamic, n.Cluster.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range insts {
		if strings.HasPrefix(i.Pool, "tty-") || strings.HasPrefix(i.Pool, "camera-") {
			t.Errorf("the default install made Instance %s of pool %s", i.Name, i.Pool)
		}
	}
	return offered
}

// runOperatorTerminal writes a drop-in into the host's /etc/cdi, as an
// operator who wants pods to have some of the node's terminals does (the
// node test's, offering the highest-numbered few), waits until the pod's
// bridge offers them, and runs a workload that asks for one.
func runOperatorTerminal(t *testing.T, n *Node) *Pod {
	reserved, err := ttyReserve()
	if err != nil {
		t.Fatal(err)
	}
	tty := dropIns(hostStateDir, reserved)[0]
	if err := tty.Write(hostConfDir); err != nil {
		t.Fatal(err)
	}
	n.DropIns, n.Offered = []DropIn{tty}, map[string]int{tty.Type: ttysOffered}
	timed(t, "the operator's terminals in the Node's allocatable", func() { n.waitResources(t) })
	return n.RunPod(t, "ds-tty", map[string]int64{n.Pool("tty"): 1})
}

// testRollingUpdate moves the DaemonSet to the image's other tag: the old
// pod goes, the new one becomes Ready, the workload keeps running with
// its slot claimed, and a new workload gets a terminal from the new pod.
func testRollingUpdate(t *testing.T, n *Node, held *Pod) {
	old, err := n.WaitBridgePod(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	image := n.Layout.BridgeImage[len(n.Layout.BridgeImage)-1]
	if err := n.SetBridgeImage(t.Context(), image); err != nil {
		t.Fatal(err)
	}
	var updated = old
	timed(t, "the rolling update (to the new pod Ready)", func() {
		if updated, err = n.WaitBridgePod(t.Context(), string(old.UID)); err != nil {
			t.Fatal(err)
		}
	})
	for _, c := range updated.Spec.Containers {
		if c.Image != image {
			t.Errorf("the new pod's %s runs %s, want %s", c.Name, c.Image, image)
		}
	}
	n.CheckStillRunning(t, held)
	for _, s := range held.Slots {
		if err := checkClaimed(t.Context(), n, s); err != nil {
			t.Error(err)
		}
	}
	n.RunPod(t, "ds-tty-after-update", map[string]int64{n.Pool("tty"): 1})
	ok, err := bridgeAllocations(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ok < 1 {
		t.Errorf("the new pod's bridge counts %d successful allocations, want the new workload's", ok)
	}
}

// checkClaimed fails unless the slot's Instance records it held by this
// node, as the pod holds it: an Instance-level claim, or a
// Configuration-level one for the pod's virtual device.
func checkClaimed(ctx context.Context, n *Node, slot Slot) error {
	all, err := listInstances(ctx, n.Cluster.Dynamic, n.Cluster.Namespace)
	if err != nil {
		return err
	}
	for _, i := range all {
		if i.Name == slot.Instance.Name {
			if u := i.Usage[slot.ID]; u != Name && u != "C:"+slot.VDev+":"+Name {
				return fmt.Errorf("slot %s of %s is %q after the update, want it held by %s", slot.ID, i.Name, i.Usage[slot.ID], Name)
			}
			return nil
		}
	}
	return fmt.Errorf("Instance %s is gone after the update", slot.Instance.Name)
}

// bridgeAllocations sums the bridge's successful Allocate calls, from its
// metrics on the node's network.
func bridgeAllocations(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(bridgeReadyz, "readyz")+"metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("the bridge's metrics: %w", err)
	}
	sum := 0
	for _, m := range families["cdi_bridge_allocations_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" && l.GetValue() == "ok" {
				sum += int(m.GetCounter().GetValue())
			}
		}
	}
	return sum, nil
}

// checkPodNotForbidden fails the test for every line of the bridge pod's
// logs, as the kubelet keeps them, in which the API server refused it
// something: the pod's projected ServiceAccount token and the shipped
// RBAC must grant all it does, leader election included.
func checkPodNotForbidden(t *testing.T, namespace string) {
	logs, err := filepath.Glob(filepath.Join("/var/log/pods", namespace+"_*", "bridge", "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no log of the bridge's container under /var/log/pods (%v)", err)
	}
	for _, l := range logs {
		checkNotForbidden(t, l)
	}
}

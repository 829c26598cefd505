package node

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cdiexec/cdi/bridge/broker"
	"github.com/cdiexec/cdi/bridge/dradevices"
)

// brokerGrace is the test's Brokers' deletionGraceSeconds: long enough
// that a camera's discovery after its drop-in is back comes within it
// when it must, short enough to wait for.
const brokerGrace = 10

// TestBrokers runs Brokers on a real node whose bridge acts on them in
// the pods' namespace, holding the shipped RBAC of bridge/deploy and of
// its DRA and Brokers examples: the cameras (two, of two slots each) by
// the device plugins, the terminals through DRA. Every pod reports what
// it saw.
func TestBrokers(t *testing.T) {
	l := requireNode(t).Sub("brokers")
	n := StartDRANodeWith(t, l, true, DRANodeOptions{
		Controllers: brokerControllers,
		Apply: func(ctx context.Context, c *Cluster) error {
			return c.applyBrokersRBAC(ctx, filepath.Join(l.Repo, brokersExamples))
		},
		BridgeFlags: map[string]string{"broker-namespaces": PodNamespace},
	})
	b := newBrokers(t, n.Cluster, l)
	if !t.Run("a Job per camera: each pod sees its camera", func(t *testing.T) { testCameraJobs(t, n, b) }) {
		t.Fatal("not going on: the steps below change that Broker")
	}
	t.Run("a completed Job is not run again by a new leader; a spec change runs it again", func(t *testing.T) {
		testJobsRerun(t, n, b)
	})
	t.Run("a camera gone from the drop-in loses its Job after the grace, and has it again once back", func(t *testing.T) {
		testCameraGone(t, n, b)
	})
	b.remove(t, "inventory")
	t.Run("a Deployment per camera, two pods each, the leader killed while it makes them", func(t *testing.T) {
		testCameraDeployments(t, n, b)
	})
	t.Run("one pod over both cameras of the pool", func(t *testing.T) { testCameraPair(t, n, b) })
	t.Run("a Job per terminal through DRA, each claim selecting its terminal", func(t *testing.T) { testTerminalJobs(t, n, b) })
}

// cameraJobs is the spec of a Broker of a Job per camera of the node's
// camera pool.
func cameraJobs(n *DRANode, reports string) broker.Spec {
	return broker.Spec{Pool: n.Pool("camera")[len(domain)+1:], DeletionGraceSeconds: ptr.To(int64(brokerGrace)),
		Job: &batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: brokerPodTemplate(reports, true)}}
}

// cameraIDs maps the node's cameras' Instance names to their ids.
func cameraIDs(t *testing.T, n *DRANode) map[string]string {
	out := map[string]string{}
	for _, i := range n.Instances(t, "camera") {
		out[i.Name] = i.DeviceID
	}
	return out
}

// wantCamera is the environment the endpoint plugin gives a container
// for the camera of id, and the variables it must lack.
func wantCamera(id string) (env map[string]string, absent []string) {
	for _, c := range cameras {
		if c["id"] != id {
			continue
		}
		env = map[string]string{"CAMERA_ID": id, "CAMERA_URL": c["url"].(string)}
		extra, _ := c["env"].(map[string]string)
		maps.Copy(env, extra)
		if len(extra) == 0 {
			absent = []string{"CAMERA_CODEC"}
		}
		return env, absent
	}
	panic("no camera " + id)
}

// checkCameraPods checks that each pod saw exactly its camera's
// variables: the camera its Broker made it for (its device label), and
// no other's. It returns the pods by camera id.
func checkCameraPods(t *testing.T, n *DRANode, b *brokers, pods []corev1.Pod) map[string][]string {
	ids := cameraIDs(t, n)
	byCamera := map[string][]string{}
	for _, p := range pods {
		id := ids[p.Labels[broker.LabelDevice]]
		byCamera[id] = append(byCamera[id], p.Name)
		r := b.report(t, p)
		want, absent := wantCamera(id)
		for k, v := range want {
			if r.Env[k] != v {
				t.Errorf("pod %s (camera %q): %s=%q, want %q", p.Name, id, k, r.Env[k], v)
			}
		}
		for _, k := range absent {
			if v, ok := r.Env[k]; ok {
				t.Errorf("pod %s (camera %q): %s=%q, another camera's", p.Name, id, k, v)
			}
		}
		t.Logf("pod %s (camera %q) saw CAMERA_ID=%q CAMERA_URL=%q", p.Name, id, r.Env["CAMERA_ID"], r.Env["CAMERA_URL"])
	}
	return byCamera
}

func testCameraJobs(t *testing.T, n *DRANode, b *brokers) {
	b.create(t, "inventory", cameraJobs(n, b.reports))
	b.wait(t, "inventory", "both Jobs Completed", b.every(t, "inventory", broker.Completed, "lobby", "loading-dock"))
	pods := b.waitPods(t, broker.LabelBroker+"=inventory", "two succeeded", allSucceeded(2))
	if got := checkCameraPods(t, n, b, pods); len(got["lobby"]) != 1 || len(got["loading-dock"]) != 1 {
		t.Errorf("pods by camera %v, want one each", got)
	}
}

// jobsOf is the Broker's Jobs by name, with their UIDs.
func jobsOf(t *testing.T, n *DRANode, name string) map[string]string {
	t.Helper()
	l, err := n.Cluster.Client.BatchV1().Jobs(PodNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: broker.LabelBroker + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return uidsByName(l.Items)
}

// uidsByName is the objects' UIDs by their names.
func uidsByName[T any, P interface {
	*T
	metav1.Object
}](items []T) map[string]string {
	out := map[string]string{}
	for i := range items {
		o := P(&items[i])
		out[o.GetName()] = string(o.GetUID())
	}
	return out
}

// leaderQuiet is how long the test watches a new leader do nothing: its
// first look at a Broker comes within a second of its "acting on
// Brokers" (bridge/SCALING.md, "Brokers").
const leaderQuiet = 5 * time.Second

// testJobsRerun restarts the bridge, which leads again with nothing in
// memory: the completed Jobs stay as they are. Then the Broker's spec
// changes, and both Jobs run again, their pods seeing the change.
func testJobsRerun(t *testing.T, n *DRANode, b *brokers) {
	before := jobsOf(t, n, "inventory")
	if err := n.Bridge.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := waitBridgeReady(t.Context(), n.Bridge); err != nil {
		t.Fatal(err)
	}
	waitLogLine(t, n.Bridge, "acting on Brokers", 2)
	time.Sleep(leaderQuiet)
	if after := jobsOf(t, n, "inventory"); !maps.Equal(after, before) {
		t.Errorf("after a new leader: Jobs %v, before %v", after, before)
	}
	b.update(t, "inventory", func(s *broker.Spec) {
		c := &s.Job.Template.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "BROKER_RUN", Value: "2"})
	})
	b.wait(t, "inventory", "both Jobs made anew and Completed", func(br *broker.Broker) bool {
		now := jobsOf(t, n, "inventory")
		for name, uid := range before {
			if now[name] == uid {
				return false
			}
		}
		return b.every(t, "inventory", broker.Completed, "lobby", "loading-dock")(br)
	})
	pods := b.waitPods(t, broker.LabelBroker+"=inventory", "two succeeded", allSucceeded(2))
	checkCameraPods(t, n, b, pods)
	for _, p := range pods {
		if r := b.report(t, p); r.Env["BROKER_RUN"] != "2" {
			t.Errorf("pod %s: BROKER_RUN=%q, want the changed spec's 2", p.Name, r.Env["BROKER_RUN"])
		}
	}
	if after := jobsOf(t, n, "inventory"); len(after) != 2 || slices.ContainsFunc(slices.Collect(maps.Values(after)), func(uid string) bool {
		return slices.Contains(slices.Collect(maps.Values(before)), uid)
	}) {
		t.Errorf("after the change: Jobs %v, before %v: want two new ones", after, before)
	}
}

// waitLogLine waits until the bridge's log holds line count times.
func waitLogLine(t *testing.T, p *Proc, line string, count int) {
	t.Helper()
	deadline := time.Now().Add(bridgeReadyWait)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(p.LogPath)
		if err == nil && strings.Count(string(data), line) >= count {
			return
		}
		time.Sleep(pollInterval)
	}
	t.Fatalf("the bridge's log never said %q %d times", line, count)
}

// cameraDropIn is the node's camera drop-in.
func cameraDropIn(n *DRANode) DropIn {
	for _, d := range n.DropIns {
		if d.Type == "camera" {
			return d
		}
	}
	panic("no camera drop-in")
}

// testCameraGone removes the loading dock from the camera drop-in: its
// Job stays through the grace, then goes; the lobby's is never touched.
// Back in the drop-in, the camera gets a new Job, which runs.
func testCameraGone(t *testing.T, n *DRANode, b *brokers) {
	d := cameraDropIn(n)
	before := jobsOf(t, n, "inventory")
	lobbyOnly := d
	lobbyOnly.Args = maps.Clone(d.Args)
	lobbyOnly.Args["endpoints"] = cameras[:1]
	if err := lobbyOnly.Write(n.ConfDir); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	b.wait(t, "inventory", "the loading dock gone since, on its Job", func(*broker.Broker) bool {
		l, err := n.Cluster.Client.BatchV1().Jobs(PodNamespace).List(t.Context(), metav1.ListOptions{
			LabelSelector: broker.LabelDevice + "=" + deviceKey("loading-dock")})
		if err != nil || len(l.Items) != 1 {
			return false
		}
		_, ok := l.Items[0].Annotations[broker.AnnotationGoneSince]
		return ok
	})
	if after := jobsOf(t, n, "inventory"); len(after) != 2 {
		t.Errorf("within the grace: Jobs %v, want both", after)
	}
	b.wait(t, "inventory", "the loading dock's Job deleted", b.every(t, "inventory", broker.Completed, "lobby"))
	t.Logf("the loading dock's Job deleted %v after its camera left the drop-in (grace %ds)", time.Since(gone).Round(time.Second), brokerGrace)
	after := jobsOf(t, n, "inventory")
	for name, uid := range after {
		if before[name] != uid {
			t.Errorf("Job %s is %s, was %s: the lobby's Job was replaced", name, uid, before[name])
		}
	}
	if len(after) != 1 {
		t.Errorf("after the grace: Jobs %v, want the lobby's alone", after)
	}
	if err := d.Write(n.ConfDir); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "inventory", "the loading dock's Job made and run again", b.every(t, "inventory", broker.Completed, "lobby", "loading-dock"))
	if again := jobsOf(t, n, "inventory"); len(again) != 2 {
		t.Errorf("the camera back: Jobs %v", again)
	}
}

// testCameraDeployments creates a Broker of a Deployment of two pods per
// camera (each camera's capacity) and kills the bridge, the leader, as
// soon as the first Deployment shows, then starts it again: a new leader
// that finds what the old one made. Nothing is made twice or deleted, and
// four pods run, two on each camera. Then a camera leaves the drop-in.
func testCameraDeployments(t *testing.T, n *DRANode, b *brokers) {
	spec := cameraJobs(n, b.reports)
	spec.Job, spec.Deployment = nil, &broker.DeploymentTemplate{Replicas: ptr.To(int32(2)), Template: brokerPodTemplate(b.reports, false)}
	b.create(t, "frames", spec)
	var atKill map[string]string
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, brokerWait, true, func(ctx context.Context) (bool, error) {
		atKill = deploymentsOf(t, n, "frames")
		return len(atKill) > 0, nil
	})
	if err != nil {
		t.Fatalf("no Deployment made: %v", err)
	}
	if err := n.Bridge.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the leader killed once a Deployment showed; %d of 2 made by then", len(atKill))
	if err := n.Bridge.Start(); err != nil {
		t.Fatal(err)
	}
	if err := waitBridgeReady(t.Context(), n.Bridge); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "frames", "a Deployment Active per camera", b.every(t, "frames", broker.Active, "lobby", "loading-dock"))
	pods := liveOnly(b.waitPods(t, broker.LabelBroker+"=frames", "four running", allRunning(4)))
	if got := checkCameraPods(t, n, b, pods); len(got["lobby"]) != 2 || len(got["loading-dock"]) != 2 {
		t.Errorf("pods by camera %v, want two each", got)
	}
	deps := deploymentsOf(t, n, "frames")
	for name, uid := range atKill {
		if deps[name] != uid {
			t.Errorf("Deployment %s is %q, was %s when the leader was killed: made twice", name, deps[name], uid)
		}
	}
	if len(deps) != 2 {
		t.Errorf("Deployments %v, want two", deps)
	}
	testDeploymentCameraGone(t, n, b, pods)
	b.remove(t, "frames")
}

// testDeploymentCameraGone removes the loading dock from the drop-in
// under its Deployment's pods, which hold it: the bridge keeps it,
// unhealthy, while they do, and the kubelet has none of it to allocate.
// Its Deployment goes after the grace, and its pods with it; the lobby's
// pods run on untouched. Back in the drop-in, the camera gets a new
// Deployment.
func testDeploymentCameraGone(t *testing.T, n *DRANode, b *brokers, pods []corev1.Pod) {
	ids := cameraIDs(t, n)
	lobby := map[string]bool{}
	for _, p := range pods {
		if ids[p.Labels[broker.LabelDevice]] == "lobby" {
			lobby[string(p.UID)] = true
		}
	}
	d := cameraDropIn(n)
	lobbyOnly := d
	lobbyOnly.Args = maps.Clone(d.Args)
	lobbyOnly.Args["endpoints"] = cameras[:1]
	if err := lobbyOnly.Write(n.ConfDir); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	b.wait(t, "frames", "the loading dock's Deployment deleted", b.every(t, "frames", broker.Active, "lobby"))
	t.Logf("the loading dock's Deployment deleted %v after its camera left the drop-in, its pods holding it (grace %ds)",
		time.Since(gone).Round(time.Second), brokerGrace)
	left := liveOnly(b.waitPods(t, broker.LabelBroker+"=frames", "the lobby's two alone", allRunning(2)))
	for _, p := range left {
		if !lobby[string(p.UID)] {
			t.Errorf("pod %s (camera %q) is not one of the lobby's pods from before", p.Name, ids[p.Labels[broker.LabelDevice]])
		}
	}
	if err := d.Write(n.ConfDir); err != nil {
		t.Fatal(err)
	}
	b.wait(t, "frames", "the loading dock's Deployment made again", b.every(t, "frames", broker.Active, "lobby", "loading-dock"))
	b.waitPods(t, broker.LabelBroker+"=frames", "four running", allRunning(4))
}

// deploymentsOf is the Broker's Deployments by name, with their UIDs.
func deploymentsOf(t *testing.T, n *DRANode, name string) map[string]string {
	t.Helper()
	l, err := n.Cluster.Client.AppsV1().Deployments(PodNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: broker.LabelBroker + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return uidsByName(l.Items)
}

// testCameraPair runs one pod over two cameras of the pool: it sees
// both.
func testCameraPair(t *testing.T, n *DRANode, b *brokers) {
	spec := cameraJobs(n, b.reports)
	spec.Strategy, spec.Count = broker.Pool, 2
	spec.Job, spec.Deployment = nil, &broker.DeploymentTemplate{Template: brokerPodTemplate(b.reports, false)}
	b.create(t, "pair", spec)
	pods := liveOnly(b.waitPods(t, broker.LabelBroker+"=pair", "one running", allRunning(1)))
	r := b.report(t, pods[0])
	got := strings.Split(r.Env["CAMERA_ID"], ",")
	slices.Sort(got)
	if !slices.Equal(got, []string{"loading-dock", "lobby"}) {
		t.Errorf("pod %s: CAMERA_ID=%q, want both cameras", pods[0].Name, r.Env["CAMERA_ID"])
	}
	b.remove(t, "pair")
}

// testTerminalJobs runs a Job per terminal of two of the pool served
// through DRA: each pod sees its terminal's device node, and no other.
func testTerminalJobs(t *testing.T, n *DRANode, b *brokers) {
	slices_, err := n.waitSlices(t.Context(), ttysOffered, slicesWait)
	if err != nil {
		t.Fatal(err)
	}
	ids := slices.Sorted(maps.Values(poolDevices(slices_)))[:2]
	spec := broker.Spec{Pool: draPool, Selector: &broker.Selector{DeviceIDs: ids},
		Job: &batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: brokerPodTemplate(b.reports, true)}}
	b.create(t, "consoles", spec)
	b.wait(t, "consoles", "a Job Completed per terminal", b.every(t, "consoles", broker.Completed, ids...))
	byKey := map[string]string{}
	for _, id := range ids {
		byKey[deviceKey(id)] = id
	}
	for _, p := range b.waitPods(t, broker.LabelBroker+"=consoles", "two succeeded", allSucceeded(2)) {
		id := byKey[p.Labels[broker.LabelDevice]]
		var seen []string
		for _, d := range b.report(t, p).Devices {
			seen = append(seen, d.Path)
		}
		if want := []string{"/dev/" + id}; !slices.Equal(seen, want) {
			t.Errorf("pod %s (terminal %s) saw device nodes %v, want %v", p.Name, id, seen, want)
		}
		tpl, err := n.Cluster.Client.ResourceV1().ResourceClaimTemplates(PodNamespace).Get(t.Context(), *p.Spec.ResourceClaims[0].ResourceClaimTemplateName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sel := tpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression
		if !strings.Contains(sel, fmt.Sprintf(`.%s == %q`, dradevices.AttrID, id)) {
			t.Errorf("pod %s (terminal %s): its claim selects %s", p.Name, id, sel)
		}
	}
	b.remove(t, "consoles")
}

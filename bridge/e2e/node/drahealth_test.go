package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cdiexec/cdi/bridge/dradevices"
)

// The DRA health node: a drop-in of its own whose one terminal is a copy
// of a real one under the test's root, served through DRA beside the
// tty drop-in's.
const (
	hotplugPool = "tty-hotplug"
	// healthClaim is the pod's claim as its container names it
	// (newScheduledPod's); the kubelet names the claim's entry in
	// allocatedResourcesStatus "claim:<name>".
	healthClaim = "devices"
	// healthBound is how soon the pod's status must show a change of
	// its device's health: inotify, the debounce (100 ms), an INFO, the
	// report on the kubelet's health stream, and the kubelet's status
	// update.
	healthBound = 2 * time.Second
	// bridgeMetrics is the bridge's /metrics, beside bridgeReadyz.
	bridgeMetrics = "http://127.0.0.1:8089/metrics"
	// firstPublishMsg is the bridge's log line as the first discovery's
	// DRA pools reach the slice controller.
	firstPublishMsg = "the first discovery's DRA pools handed to the slice controller"
)

// TestDRAHealth runs a pod whose claim holds a terminal served through
// DRA, removes the terminal's device node and puts it back: the pod's
// status (status.containerStatuses[].allocatedResourcesStatus, which the
// 1.37 kubelet fills from the driver's DRAResourceHealth v1 stream) shows
// the device Unhealthy, saying why, within healthBound of the removal,
// and Healthy again within healthBound of its return, the pod still
// running; meanwhile the device stays in its slice, tainted
// <domain>/unhealthy=vanished. The status names the device by the first CDI id the bridge's
// NodePrepareResources returned, <domain>/claim=<claim UID>-0, which
// must therefore be the device's own. The bridge's /metrics counts the
// claim's prepare and unprepare and the pool's devices.
func TestDRAHealth(t *testing.T) {
	n := StartDRANode(t, requireNode(t).Sub("dra-health"), true)
	node, like := n.serveHotplug(t)
	logFirstPublish(t, n.Bridge.LogPath)
	p := n.runHotplugPod(t, "health")
	resourceID := domain + "/" + dradevices.ClaimClass + "=" + string(p.Claim.UID) + "-0"
	if _, err := n.waitClaimHealth(t.Context(), p.Name, resourceID, corev1.ResourceHealthStatusHealthy, podStartWait); err != nil {
		t.Fatal(err)
	}
	checkDRAMetrics(t, map[string]func(float64) bool{
		`cdi_bridge_dra_devices{pool="tty-hotplug",state="published"}`:      eq(1),
		`cdi_bridge_dra_devices{pool="tty-hotplug",state="tainted"}`:        eq(0),
		`cdi_bridge_dra_prepare_duration_seconds_count{pool="tty-hotplug"}`: atLeast(1),
	})

	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	h, err := n.waitClaimHealth(t.Context(), p.Name, resourceID, corev1.ResourceHealthStatusUnhealthy, healthWait)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(removed)
	t.Logf("Unhealthy in the pod's status %v after the device node's removal: %q", took.Round(time.Millisecond), msg(h))
	if took > healthBound {
		t.Errorf("Unhealthy in the pod's status %v after the removal, want within %v", took.Round(time.Millisecond), healthBound)
	}
	if !strings.HasPrefix(msg(h), "vanished") {
		t.Errorf("the pod's status says %q of the device, want why: vanished", msg(h))
	}
	// The claim holds the device, so discovery keeps it: it stays in its
	// slice, tainted.
	if err := n.waitTaint(t.Context(), Name+"/"+hotplugPool, "vanished"); err != nil {
		t.Error(err)
	}
	checkDRAMetrics(t, map[string]func(float64) bool{
		`cdi_bridge_dra_devices{pool="tty-hotplug",state="tainted"}`: eq(1),
	})

	if err := copyDeviceNode(node, like); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if _, err := n.waitClaimHealth(t.Context(), p.Name, resourceID, corev1.ResourceHealthStatusHealthy, healthWait); err != nil {
		t.Fatal(err)
	}
	took = time.Since(back)
	t.Logf("Healthy again in the pod's status %v after the device node came back", took.Round(time.Millisecond))
	if took > healthBound {
		t.Errorf("Healthy again %v after the device node came back, want within %v", took.Round(time.Millisecond), healthBound)
	}
	if err := n.waitTaint(t.Context(), Name+"/"+hotplugPool, ""); err != nil {
		t.Error(err)
	}
	n.CheckStillRunning(t, p.Pod)

	n.DeleteClaimPod(t, p)
	checkDRAMetrics(t, map[string]func(float64) bool{
		`cdi_bridge_dra_unprepare_duration_seconds_count{pool="tty-hotplug"}`: atLeast(1),
	})
}

// serveHotplug writes the hotplug drop-in, its one terminal a device node
// under a root of the test's own made like the highest terminal the tty
// drop-in does not offer, so that removing it unplugs nothing real; then
// restarts the bridge with the drop-in's pool among --dra-pools, and
// waits for its slice. It returns the device node's path, and the real
// terminal it is made like.
func (n *DRANode) serveHotplug(t *testing.T) (node, like string) {
	t.Helper()
	terminal, err := ttyReserve()
	if err != nil {
		t.Fatal(err)
	}
	like = "/dev/tty" + strconv.Itoa(terminal)
	root := n.Layout.Path("hotplug-root")
	node = filepath.Join(root, like)
	if err := copyDeviceNode(node, like); err != nil {
		t.Fatal(err)
	}
	d := DropIn{Type: "tty", ID: "hotplug", Plugin: "generic-tty", Args: map[string]any{
		"root": root, "stateDir": n.Layout.Path("cdi-state-hotplug"), "num_system_reserved": terminal - 1}}
	if d.Pool() != hotplugPool {
		t.Fatalf("the drop-in's pool is %s, not %s", d.Pool(), hotplugPool)
	}
	if err := d.Write(n.ConfDir); err != nil {
		t.Fatal(err)
	}
	n.restartBridge(t, draPool+","+hotplugPool)
	if err := n.waitPoolDevices(t.Context(), Name+"/"+hotplugPool, 1); err != nil {
		t.Fatal(err)
	}
	return node, like
}

// waitPoolDevices waits until the node's slices of pool list count
// devices.
func (n *DRANode) waitPoolDevices(ctx context.Context, pool string, count int) error {
	ctx, cancel := context.WithTimeout(ctx, slicesWait)
	defer cancel()
	last := "no slices"
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		got, err := n.nodeSlices(ctx)
		if err != nil {
			last = err.Error()
			continue
		}
		devices := 0
		for _, s := range got {
			if s.Spec.Pool.Name == pool {
				devices += len(s.Spec.Devices)
			}
		}
		if devices == count {
			return nil
		}
		last = fmt.Sprintf("%d devices", devices)
	}
	return fmt.Errorf("pool %s: not %d devices within %v: %s", pool, count, slicesWait, last)
}

// waitTaint waits until the one device of the node's pool has the taint
// <domain>/unhealthy=value:NoSchedule, or none when value is "".
func (n *DRANode) waitTaint(ctx context.Context, pool, value string) error {
	ctx, cancel := context.WithTimeout(ctx, slicesWait)
	defer cancel()
	want := "[]"
	if value != "" {
		want = fmt.Sprintf("[%s/%s=%s:%s]", domain, dradevices.TaintUnhealthy, value, resourceapi.DeviceTaintEffectNoSchedule)
	}
	last := "no slices"
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		got, err := n.nodeSlices(ctx)
		if err != nil {
			last = err.Error()
			continue
		}
		var taints []string
		devices := 0
		for _, s := range got {
			for _, d := range s.Spec.Devices {
				if s.Spec.Pool.Name != pool {
					continue
				}
				devices++
				for _, tn := range d.Taints {
					taints = append(taints, fmt.Sprintf("%s=%s:%s", tn.Key, tn.Value, tn.Effect))
				}
			}
		}
		if last = fmt.Sprintf("%d devices, taints %v", devices, taints); devices == 1 && fmt.Sprint(taints) == want {
			return nil
		}
	}
	return fmt.Errorf("pool %s: not one device with taints %s within %v: %s", pool, want, slicesWait, last)
}

// runHotplugPod runs a pod, placed by the scheduler, whose claim holds
// the hotplug pool's terminal, and returns it once its container runs.
func (n *DRANode) runHotplugPod(t *testing.T, name string) *ClaimPod {
	t.Helper()
	ctx := t.Context()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "tty", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "tty.cdi.local",
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
						Expression: `device.attributes["` + domain + `"].pool == "` + hotplugPool + `"`}}}},
			}}},
		}}}
	if _, err := n.Cluster.Client.ResourceV1().ResourceClaimTemplates(PodNamespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.CreateClaimPod(t, name, tmpl.Name, nil)
	running, err := waitRunning(ctx, n.Cluster.Client, name)
	if err != nil {
		t.Fatal(err)
	}
	p := &ClaimPod{Pod: &Pod{Name: name}}
	p.ContainerID, p.StartedAt = containerState(running)
	if p.Claim, err = n.podClaim(ctx, running); err != nil {
		t.Fatal(err)
	}
	r := p.Claim.Status.Allocation.Devices.Results
	if len(r) != 1 || r[0].Pool != Name+"/"+hotplugPool {
		t.Fatalf("pod %s's claim got %+v, want the terminal of %s/%s", name, r, Name, hotplugPool)
	}
	p.RequestIDs = []string{string(p.Claim.UID) + "-0"}
	return p
}

// waitClaimHealth waits, up to within, until the pod's status shows the
// device of its claim, by resourceID, with health want, and returns that
// entry.
func (n *DRANode) waitClaimHealth(ctx context.Context, pod, resourceID string, want corev1.ResourceHealthStatus,
	within time.Duration) (corev1.ResourceHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	last := "no status"
	// Polled faster than the other waits: the bound is two seconds.
	for ; ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		p, err := n.Cluster.Client.CoreV1().Pods(PodNamespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil { // not the wait's own end
				last = err.Error()
			}
			continue
		}
		health, _ := resourceHealth(p, "claim:"+healthClaim)
		last = fmt.Sprintf("%+v", health)
		for _, h := range health {
			if string(h.ResourceID) == resourceID && h.Health == want {
				return h, nil
			}
		}
	}
	return corev1.ResourceHealth{}, fmt.Errorf("pod %s: device %s not %s in allocatedResourcesStatus within %v; last seen %s",
		pod, resourceID, want, within, last)
}

// logFirstPublish logs, for each start of the bridge in its log, how long
// after the process's start its DRA front end started, and with it the
// slice controller, and how long after that the first discovery, the
// prepared claims rebuilt, reached the controller: the controller's start
// takes a second (its informer sync, checked once a second), and a
// discovery later than that is published at once.
func logFirstPublish(t *testing.T, log string) {
	data, err := os.ReadFile(log)
	if err != nil {
		t.Error(err)
		return
	}
	var started, front time.Time
	for line := range strings.Lines(string(data)) {
		var rec struct {
			Time       time.Time
			Msg        string
			SinceStart string
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Msg {
		case "starting":
			started = rec.Time
		case "DRA front end":
			front = rec.Time
		case firstPublishMsg:
			t.Logf("the bridge's DRA front end started %v after the bridge; its first discovery reached the slice controller %s after that",
				front.Sub(started).Round(time.Millisecond), rec.SinceStart)
		}
	}
}

func msg(h corev1.ResourceHealth) string {
	if h.Message == nil {
		return ""
	}
	return *h.Message
}

// checkDRAMetrics scrapes the bridge's /metrics and checks each series
// (name{labels} as the text format writes it) with its test; a series
// missing is 0.
func checkDRAMetrics(t *testing.T, want map[string]func(float64) bool) {
	t.Helper()
	got, err := scrapeBridge(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for series, ok := range want {
		if !ok(got[series]) {
			t.Errorf("the bridge's %s is %v", series, got[series])
		}
	}
}

// scrapeBridge reads the bridge's /metrics into values by series.
func scrapeBridge(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, bridgeMetrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the bridge's metrics: %w", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetHistogram() != nil:
				out[name+"_count{"+strings.Join(labels, ",")+"}"] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

func eq(want float64) func(float64) bool      { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }

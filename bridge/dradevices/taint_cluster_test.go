package dradevices

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/internal/testing/kubelettest"
	"github.com/cdiexec/cdi/bridge/internal/testing/schedtest"
	"github.com/cdiexec/cdi/plugins/exectest"
)

// Against the real scheduler and controller-manager: a device tainted
// unhealthy is allocated to no new claim while an untainted one is; a
// pod whose device turns unhealthy keeps running under the default
// NoSchedule taint, and is evicted by the device taint eviction
// controller when its drop-in asks for NoExecute. The fixture's four
// terminals are served by two drop-ins of the real generic-tty plugin,
// the second asking for NoExecute (a top-level member the plugin
// ignores).
func TestClusterTaintsUnhealthyDevices(t *testing.T) {
	c := startClusterWith(t, schedtest.ClaimControllers+","+schedtest.TaintEvictionController)
	confDir := t.TempDir()
	for file, dra := range map[string]map[string]any{"tty.d/generic.conf": nil,
		"tty.d/critical.conf": {"unhealthyTaintEffect": "NoExecute"}} {
		var doc map[string]any
		if err := json.Unmarshal(exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
			"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(), "num_system_reserved": 40}), &doc); err != nil {
			t.Fatal(err)
		}
		if dra != nil {
			doc[SettingsKey] = dra
		}
		data, _ := json.Marshal(doc)
		writeDropIn(t, confDir, file, data)
	}
	pools, err := (&discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}}).Discover(t.Context())
	if err != nil || len(pools) != 2 || len(pools[0].Devices) != 4 || len(pools[1].Devices) != 4 {
		t.Fatalf("discovery: %+v, %v; want two pools of four terminals, the drop-in's member no bother to the plugin", pools, err)
	}
	r := &rig{pools: pools, cdiDir: t.TempDir(), ckpt: filepath.Join(t.TempDir(), "claims.json")}
	r.p = r.preparer(t)
	d, stop := r.startDriver(t, c.Client, kubelettest.SocketDir(t, "dra"))
	defer stop()
	c.waitSlices(t, "n/tty-critical", "tty", 4)
	c.waitSlices(t, "n/tty-generic", "tty", 4)

	c.podFromPool(t, "keep", "tty-generic", 1)
	c.podFromPool(t, "evict", "tty-critical", 1)
	kept, _ := c.allocated(t, c.WaitPod(t, "keep", "scheduled", scheduled))
	evicted, _ := c.allocated(t, c.WaitPod(t, "evict", "scheduled", scheduled))
	// The pods' devices turn unhealthy, and two more of tty-generic's:
	// one of its terminals is left healthy.
	sick := map[string]bool{kept[0]: true, evicted[0]: true}
	for _, dev := range pools[1].Devices {
		if n := "n/tty-generic " + DeviceName(dev.ID); len(sick) < 4 && !sick[n] {
			sick[n] = true
		}
	}
	healthy := ""
	for i := range pools {
		for j, dev := range pools[i].Devices {
			name := "n/" + pools[i].Name + " " + DeviceName(dev.ID)
			pools[i].Devices[j].Healthy = !sick[name]
			if pools[i].Name == "tty-generic" && !sick[name] {
				healthy = name
			}
		}
	}
	r.p.SetPools(pools)
	if err := d.PublishResources(t.Context(), Resources("cdi.local", clusterNode, pools, nil)); err != nil {
		t.Fatal(err)
	}
	c.waitTainted(t, "n/tty-critical", 1)
	c.waitTainted(t, "n/tty-generic", 3)

	t.Run("NoExecute evicts", func(t *testing.T) {
		c.WaitPod(t, "evict", "evicted by the device taint eviction controller", evictedForTaint)
	})
	t.Run("NoSchedule does not", func(t *testing.T) {
		if p := c.WaitPod(t, "keep", "there", func(*corev1.Pod) bool { return true }); p.DeletionTimestamp != nil {
			t.Errorf("pod keep, on a device tainted NoSchedule, is being deleted: %+v", p.Status.Conditions)
		}
	})
	t.Run("a tainted device is not allocated", func(t *testing.T) {
		c.podFromPool(t, "two", "tty-generic", 2)
		c.WaitPod(t, "two", "unschedulable: one untainted terminal is left", schedtest.Unschedulable)
	})
	t.Run("an untainted one is", func(t *testing.T) {
		c.podFromPool(t, "one", "tty-generic", 1)
		if got, _ := c.allocated(t, c.WaitPod(t, "one", "scheduled", scheduled)); len(got) != 1 || got[0] != healthy {
			t.Errorf("allocation %v, want the one untainted terminal %s", got, healthy)
		}
	})
}

// podFromPool creates a pod on the node whose claim asks for count
// terminals of pool.
func (c *cluster) podFromPool(t *testing.T, name, pool string, count int64) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "ttys", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: ttyClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount,
				Count: count, Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["cdi.local"].pool == "` + pool + `"`}}}},
		}}}},
	}}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(c.Namespace).Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.podWithClaim(t, name, tmpl.Name)
}

// waitTainted waits until count devices of the node's pool carry the
// taint <driver>/unhealthy.
func (c *cluster) waitTainted(t *testing.T, pool string, count int) {
	t.Helper()
	var tainted int
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, clusterWait, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=cdi.local"})
		if err != nil {
			return false, nil
		}
		tainted = 0
		for _, s := range l.Items {
			for _, d := range s.Spec.Devices {
				if s.Spec.Pool.Name == pool && len(d.Taints) == 1 && d.Taints[0].Key == "cdi.local/"+TaintUnhealthy {
					tainted++
				}
			}
		}
		return tainted == count, nil
	})
	if err != nil {
		t.Fatalf("pool %s: %d devices tainted, want %d: %v", pool, tainted, count, err)
	}
}

// evictedForTaint is whether the device taint eviction controller is
// deleting the pod.
func evictedForTaint(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue && cond.Reason == "DeletionByDeviceTaintManager" {
			return p.DeletionTimestamp != nil
		}
	}
	return false
}

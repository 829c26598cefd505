package node

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	kwait "k8s.io/apimachinery/pkg/util/wait"

	"github.com/cdiexec/cdi/bridge/dradevices"
)

// A bridge pod of a rolling update, as the chart's DaemonSet runs it
// with dra.pools: its pod's UID (--pod-uid) and, here where both pods
// use the node's network, a metrics port of its own.
type podBridge struct {
	uid, metrics string
}

func (b podBridge) readyz() string { return "http://127.0.0.1" + b.metrics + "/readyz" }

// registration is the kubelet-plugin library's registration socket of
// the pod's driver (kubeletplugin.RollingUpdateRegistrarSocketFile).
func (b podBridge) registration() string {
	return kubeletDir + "/plugins_registry/" + domain + "-" + b.uid + "-reg.sock"
}

// startPodBridge starts the bridge of pod b, reading the drop-ins in
// confDir, without waiting for it; the test's pods are deleted before it
// stops.
func (n *DRANode) startPodBridge(t *testing.T, b podBridge, confDir string) *Proc {
	t.Helper()
	p := startBridgeProc(t, n.Layout, n.Cluster, Name, confDir, "cdi-bridge-"+b.uid, map[string]string{
		"dra-checkpoint": n.Checkpoint, "dra-pools": draPool, "pod-uid": b.uid, "metrics-address": b.metrics,
		"exec-timeout": heldInfoTimeout.String(),
	})
	t.Cleanup(func() { n.deleteAllPods(t) })
	return p
}

// heldInfoTimeout is the update's bridges' --exec-timeout: longer than
// the test holds the terminals' INFO (a pod's start), so that a held INFO
// delays a discovery and does not fail it (which would taint the
// terminals).
const heldInfoTimeout = 3 * podStartWait

// TestDRARollingUpdate updates the bridge as the chart's DaemonSet does
// with dra.pools (maxSurge 1, maxUnavailable 0): the new pod's bridge
// starts while the old one serves, both registered with the kubelet
// under their pods' UIDs, and the old one stops once the new one is
// ready. Pods with claims run across it and new claims are prepared
// through it: before the new bridge has discovered anything (its first
// INFO is held; it registers only once its claims are rebuilt, which
// waits for that discovery, so the old one prepares them), while both
// serve, and after. No Prepare fails (no pod has the kubelet's failure
// event), each claim is prepared once, by one bridge (their logs), the
// plugins hold exactly the claims' ADDs (none freed under its pod, none
// left over), the one checkpoint records every claim, and the claim the
// old bridge prepared is unprepared by the new one when its pod goes.
// The cameras, served by the device plugins of both bridges during the
// overlap, are still the Node's after it. The two share the node's lock
// (--node-lock) as the DaemonSet's pods do: the new bridge waits for it
// and takes over when the old one stops. The new release publishes
// other attributes (its drop-in gives the terminals another cdiKind),
// and one bridge writes the node's slices at a time: from the new
// bridge's start until its attributes are in the API, the pool's slices
// are written at most twice (the hand-over's update), however long both
// run; a claim prepared while both run is unprepared after.
func TestDRARollingUpdate(t *testing.T) {
	n := StartDRANode(t, requireNode(t).Sub("dra-rolling"), true)
	g := n.GateTerminals(t)
	// The node's bridge has no pod UID; the update's two pods have one.
	n.StopBridge(t)
	oldPod, newPod := podBridge{"7a1f-old", ":8089"}, podBridge{"9c2e-new", ":8090"}
	old := n.startPodBridge(t, oldPod, n.ConfDir)
	if err := waitReadyAt(t.Context(), old, oldPod.readyz()); err != nil {
		t.Fatal(err)
	}
	if err := waitPluginRegistered(t.Context(), oldPod.registration(), true); err != nil {
		t.Fatal(err)
	}
	before := n.RunClaimPod(t, "before-update", oneTerminalTpl, nil, 1)

	sw, _, err := n.watchSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Stop()
	g.Set(t, holdInfo, true)
	bridge := n.startPodBridge(t, newPod, n.newRelease(t))
	t.Cleanup(func() { g.Set(t, holdInfo, false) }) // before the bridges stop
	waitLogLine(t, bridge, `"msg":"DRA front end"`, 1)
	// The old bridge holds the node's lock: the new one writes no slice
	// until it stops.
	waitLogLine(t, bridge, `"msg":"waiting for the node lock held by another bridge`, 1)
	n.CreatePod(t, n.ClaimPodSpec(t, "new-bridge-undiscovered", oneTerminalTpl, nil))
	undiscovered := n.AwaitClaimPod(t, "new-bridge-undiscovered", 1)
	if registered, err := kubeletPluginRegistered(t.Context(), newPod.registration()); err != nil || registered {
		t.Errorf("the new bridge, its first discovery held, is registered with the kubelet: %v (%v)", registered, err)
	}
	g.Set(t, holdInfo, false)
	if err := waitPluginRegistered(t.Context(), newPod.registration(), true); err != nil {
		t.Fatal(err)
	}
	if err := waitReadyAt(t.Context(), bridge, newPod.readyz()); err != nil {
		t.Fatal(err)
	}
	both := n.RunClaimPod(t, "both-bridges", oneTerminalTpl, nil, 1)
	running := []*ClaimPod{before, undiscovered, both}
	// Both serve a while: two slice controllers would overwrite each
	// other's views, one a second (SliceSyncDelay).
	time.Sleep(overlapWatch)
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := waitPluginRegistered(t.Context(), oldPod.registration(), false); err != nil {
		t.Fatal(err)
	}
	waitLogLine(t, bridge, `"msg":"took over the node from the bridge that held its lock`, 1)
	n.checkOneWriter(t, sw)
	running = append(running, n.RunClaimPod(t, "after-update", oneTerminalTpl, nil, 1))

	n.checkNoFailedPrepare(t)
	n.checkHeldExactly(t, running)
	checkPreparedOnce(t, running, old.LogPath, bridge.LogPath)
	n.CheckStillRunning(t, pods(running)...)
	n.DeleteClaimPod(t, before) // prepared by the old bridge, unprepared by the new one
	n.DeleteClaimPod(t, both)   // prepared while both served
	timed(t, "the cameras the Node's after the update", func() { n.waitResources(t) })
}

// overlapWatch is how long TestDRARollingUpdate lets both bridges serve.
const overlapWatch = 5 * time.Second

// newCDIKind is the terminals' cdiKind in the new release's drop-in, an
// attribute of their devices in the slices.
const newCDIKind = "cdi.local/tty-next"

// newRelease writes the new release's drop-ins, the node's but for the
// terminals' cdiKind, and returns their directory.
func (n *DRANode) newRelease(t *testing.T) string {
	t.Helper()
	dir := n.Layout.Path("cdi-conf-next")
	for _, d := range n.DropIns {
		if d.Type == "tty" {
			d.Plugin = gatedPlugin
			d.Args = maps.Clone(d.Args)
			d.Args["cdiKind"] = newCDIKind
		}
		if err := d.Write(dir); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkOneWriter waits until the node's slices hold the new release's
// attributes, and checks that the watch since the new bridge started saw
// the pool's slices written at most twice.
func (n *DRANode) checkOneWriter(t *testing.T, sw *sliceWatch) {
	t.Helper()
	attr := resourceapi.QualifiedName(dradevices.AttrCDIKind)
	timed(t, "the new release's attributes in the slices", func() {
		err := kwait.PollUntilContextTimeout(t.Context(), pollInterval, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := n.nodeSlices(ctx)
			if err != nil || len(list) == 0 {
				return false, nil
			}
			for _, s := range list {
				for _, d := range s.Spec.Devices {
					if v := d.Attributes[attr].StringValue; v == nil || *v != newCDIKind {
						return false, nil
					}
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("the slices never showed the new release's %s %s: %v", attr, newCDIKind, err)
		}
	})
	events := sw.Events()
	t.Logf("the node's slices from the new bridge's start until its attributes were published: %v", events)
	if len(events) > 2 {
		t.Errorf("the node's slices were written %d times across the update, want at most 2 (one bridge writing at a time)", len(events))
	}
}

// checkNoFailedPrepare fails the test for every pod with the kubelet's
// event of a failed Prepare.
func (n *DRANode) checkNoFailedPrepare(t *testing.T) {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Pod", "reason": failedPrepare}.String()
	list, err := n.Cluster.Client.CoreV1().Events(PodNamespace).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		t.Errorf("pod %s: the kubelet failed to prepare its claims (x%d): %s", e.InvolvedObject.Name, max(e.Count, 1), e.Message)
	}
}

// checkHeldExactly checks that the plugins hold the request-ids of the
// running pods' claims and no other, and that the checkpoint records
// each claim as its pod has it (checkCheckpoint).
func (n *DRANode) checkHeldExactly(t *testing.T, running []*ClaimPod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	allocs, err := pluginAllocations(ctx, n.ConfDir, n.PluginDir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range running {
		want = append(want, p.RequestIDs...)
		if err := n.checkCheckpoint(p); err != nil {
			t.Errorf("pod %s: %v", p.Name, err)
		}
	}
	// No pod here holds a camera: every allocation is a claim's.
	if held := slices.Sorted(maps.Keys(allocs)); !slices.Equal(held, slices.Sorted(slices.Values(want))) {
		t.Errorf("the plugins hold request-ids %v, want the running pods' claims' %v", held, slices.Sorted(slices.Values(want)))
	}
}

// checkPreparedOnce checks, from the bridges' logs, that each running
// pod's claim was prepared once, by one of the two bridges.
func checkPreparedOnce(t *testing.T, running []*ClaimPod, logs ...string) {
	t.Helper()
	prepared := map[string]int{}
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			var rec struct{ Msg, UID string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "prepared a claim" {
				prepared[rec.UID]++
			}
		}
	}
	for _, p := range running {
		if got := prepared[string(p.Claim.UID)]; got != 1 {
			t.Errorf("pod %s's claim %s was prepared %d times by the two bridges, want once", p.Name, p.Claim.UID, got)
		}
	}
}

package node

import (
	"os"
	"strings"
	"testing"
	"time"
)

// afterRestartWatch is how long TestFreedRecreatedPodKubeletRestart
// watches the new pod's slot after the kubelet is ready again.
const afterRestartWatch = 20 * time.Second

// TestFreedRecreatedPodKubeletRestart runs pod web-0 on a terminal's
// Instance-level slot, deletes it (its slot goes at once, as meant), runs
// a new pod of the same name (what a StatefulSet does) on the same
// terminal, and restarts the kubelet, all well within the 10-minute
// grace. The new web-0 keeps running, and the API server says so; its
// slot must stay claimed. The bridge keeps the old web-0's name as ended
// for the whole grace, by name and not by UID, and releases the slots of
// a holder of that name as soon as a pass finds the restarting kubelet
// not listing it, without asking the API server again: a StatefulSet
// roll followed by a kubelet restart takes the device from under the
// running pod (DEL on the plugin, the slot free for any other pod).
func TestFreedRecreatedPodKubeletRestart(t *testing.T) {
	n := StartNodeWith(t, requireNode(t), "cdi-state-recreated", map[string]string{"reclaim-grace": freedGrace.String()})
	res := n.Instances(t, "tty")[0].Resource()
	a := n.RunPod(t, "web-0", map[string]int64{res: 1})
	deleted := time.Now()
	n.DeletePod(t, a.Name)
	if err := waitSlotFree(t.Context(), n, a.Slots[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("the old web-0's slot %s free %v after its delete", a.Slots[0].ID, time.Since(deleted).Round(time.Millisecond))
	if err := os.RemoveAll(n.Layout.Path("reports", "web-0")); err != nil { // the old pod's report
		t.Fatal(err)
	}
	b := n.RunPod(t, "web-0", map[string]int64{res: 1})
	slot := b.Slots[0]
	restarted := time.Now()
	if err := n.Kubelet.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := WaitNodeReady(t.Context(), n.Cluster.Client, Name, n.Kubelet, restarted); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(afterRestartWatch); time.Now().Before(end); time.Sleep(pollInterval) {
		all, err := listInstances(t.Context(), n.Cluster.Dynamic, n.Cluster.Namespace)
		if err != nil {
			continue
		}
		for _, i := range all {
			if i.Name == slot.Instance.Name && i.Usage[slot.ID] == "" {
				released := ""
				for _, l := range strings.Split(n.Bridge.Tail(400), "\n") {
					if strings.Contains(l, "released a slot") || strings.Contains(l, "has ended") {
						released += "\n  " + l
					}
				}
				t.Fatalf("the new, running web-0's slot %s of %s released %v after the kubelet's restart (grace %v); the bridge:%s",
					slot.ID, slot.Instance.Name, time.Since(restarted).Round(time.Millisecond), freedGrace, released)
			}
		}
	}
	n.CheckStillRunning(t, b)
}

package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// gatedPlugin is the name of the terminals' plugin behind a gate: a
// script in the test's plugin directory that runs generic-tty unless the
// gate says otherwise.
const gatedPlugin = "gated-generic-tty"

// Gate is what the gated plugin does beside generic-tty's work: each of
// these files, present in the gate's directory, turns a command's
// behaviour on. ADD and DEL fail with a protocol error, as a plugin does
// when a device is held outside or its state cannot be written; INFO
// waits until the file is gone. A plugin failing for real, not a fake:
// the bridge runs it as it runs every plugin.
const (
	failAdd  = "fail-add"
	failDel  = "fail-del"
	holdInfo = "hold-info"
)

// gatedScript is the gated plugin, for the gate directory and generic-tty
// of its two %s. The error documents are SPEC.md's, of the drop-in's
// cdiVersion: 10, Insufficient resources, and 13, State error. It logs
// each command to calls, one a line.
const gatedScript = `#!/bin/sh
# The node test's gate over generic-tty (bridge/e2e/node/dragate_test.go).
gate=%[1]s
echo "$CDI_COMMAND" >> "$gate/calls"
case "$CDI_COMMAND" in
ADD)
	if [ -e "$gate/fail-add" ]; then
		echo '{"cdiVersion":"0.1.0","code":10,"msg":"Insufficient resources","details":"held outside the bridge by the node test"}'
		exit 1
	fi ;;
DEL)
	if [ -e "$gate/fail-del" ]; then
		echo '{"cdiVersion":"0.1.0","code":13,"msg":"State error","details":"the node test refuses the DEL"}'
		exit 1
	fi ;;
INFO)
	while [ -e "$gate/hold-info" ]; do sleep 0.1; done ;;
esac
exec %[2]s
`

// Gate controls the gated plugin.
type Gate struct{ dir string }

// GateTerminals puts the terminals' drop-in behind the gate: its plugin
// becomes the gated script, with the same pool, devices and state. It
// waits until the bridge has run the script's INFO, that is until its
// discovery has the gated plugin, and puts the drop-in back when the
// test ends.
func (n *DRANode) GateTerminals(t testing.TB) *Gate {
	t.Helper()
	g := &Gate{dir: n.Layout.Path("gate")}
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(gatedScript, g.dir, filepath.Join(n.PluginDir, "generic-tty"))
	if err := os.WriteFile(filepath.Join(n.PluginDir, gatedPlugin), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tty := n.DropIns[0]
	if tty.Type != "tty" {
		t.Fatalf("the node's first drop-in is %s, not the terminals'", tty.Pool())
	}
	gated := tty
	gated.Plugin = gatedPlugin
	if err := gated.Write(n.ConfDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tty.Write(n.ConfDir); err != nil {
			t.Error(err)
		}
	})
	if err := g.waitCall(t.Context(), "INFO", time.Minute); err != nil {
		t.Fatalf("the bridge has not discovered the gated terminals: %v", err)
	}
	return g
}

// Set turns the gate's behaviour name on or off.
func (g *Gate) Set(t testing.TB, name string, on bool) {
	t.Helper()
	path := filepath.Join(g.dir, name)
	var err error
	if on {
		err = os.WriteFile(path, nil, 0o644)
	} else if err = os.Remove(path); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Calls returns the commands the plugin was run with, in order.
func (g *Gate) Calls() []string {
	data, _ := os.ReadFile(filepath.Join(g.dir, "calls"))
	return strings.Fields(string(data))
}

// waitCall waits until the plugin has been run with command after the
// calls so far.
func (g *Gate) waitCall(ctx context.Context, command string, within time.Duration) error {
	return g.waitCallSince(ctx, len(g.Calls()), command, within)
}

// waitCallSince waits until the plugin has been run with command after
// its first seen calls.
func (g *Gate) waitCallSince(ctx context.Context, seen int, command string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		calls := g.Calls()
		for _, c := range calls[min(seen, len(calls)):] {
			if c == command {
				return nil
			}
		}
	}
	return fmt.Errorf("no %s within %v (calls so far: %v)", command, within, g.Calls())
}

// eventWait bounds the wait for the kubelet's event on a pod: its pod
// worker retries a failed sync every 10 s or so.
const eventWait = 2 * time.Minute

// waitPodEvent waits for an event of reason on the pod and returns it.
func waitPodEvent(ctx context.Context, n *DRANode, pod, reason string) (corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, eventWait)
	defer cancel()
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod, "reason": reason}.String()
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		list, err := n.Cluster.Client.CoreV1().Events(PodNamespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil && len(list.Items) > 0 {
			return list.Items[0], nil
		}
	}
	return corev1.Event{}, fmt.Errorf("no %s event on pod %s within %v", reason, pod, eventWait)
}

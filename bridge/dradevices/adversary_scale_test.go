package dradevices

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cdiexec/cdi/bridge/reclaim"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// synthetic answers LIST with allocs and DEL with success, with no
// process, and passes every other command to the real plugin: the
// plugins' own cost is left out of the measures.
type synthetic struct{ list, add []byte }

func (s synthetic) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (*invoke.Output, error) {
	for _, kv := range env {
		switch kv {
		case spec.EnvCommand + "=LIST":
			return &invoke.Output{Stdout: s.list}, nil
		case spec.EnvCommand + "=DEL":
			return &invoke.Output{}, nil
		case spec.EnvCommand + "=ADD":
			return &invoke.Output{Stdout: s.add}, nil
		}
	}
	return invoke.ProcessExec{}.ExecPlugin(ctx, path, stdin, env)
}

// scaleRig is a rig whose checkpoint records n claims of one terminal
// each (written at once), whose plugin's LIST answers with their n ADDs,
// and pods, the kubelet naming all of them.
func scaleRig(t *testing.T, n int) (*rig, *reclaim.Pods) {
	t.Helper()
	r := newRig(t, 1)
	dev := r.pool(t, "tty-generic").Devices[0]
	f := checkpointFile{Version: checkpointVersion, Claims: map[types.UID]Claim{}}
	list := spec.ListResult{CDIVersion: "0.2.0"}
	pods := naming()
	for i := range n {
		uid := types.UID(fmt.Sprintf("%08d-aaaa-bbbb-cccc-dddddddddddd", i))
		res := &spec.AddResult{CDIVersion: "0.1.0", Devices: []string{"/dev/" + dev.ID},
			DeviceNodes: []spec.DeviceNode{{HostPath: "/dev/" + dev.ID}}, Env: map[string]string{"TTY": dev.ID},
			Units: []spec.Unit{{Resource: "tty", Device: dev.ID}}}
		f.Claims[uid] = Claim{Namespace: "ns", Name: string(uid), Devices: []PreparedDevice{{Request: "r0", Pool: "tty-generic",
			Device: DeviceName(dev.ID), ID: dev.ID, Resource: "tty", RequestID: string(uid) + "-0", Result: res}}}
		list.Allocations = append(list.Allocations, spec.Allocation{RequestID: string(uid) + "-0", Request: "tty:1", Result: *res})
		pods.Claims["ns/"+string(uid)] = true
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.ckpt, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	add, err := json.Marshal(list.Allocations[0].Result)
	if err != nil {
		t.Fatal(err)
	}
	add = []byte(strings.Replace(string(add), `"cdiVersion":"0.1.0"`, `"cdiVersion":"0.2.0"`, 1))
	r.p = r.preparer(t)
	for _, p := range r.pools {
		p.Plugin.Exec = synthetic{list: out, add: add}
	}
	t.Logf("n=%d: checkpoint %d KiB, LIST %d KiB", n, len(data)>>10, len(out)>>10)
	return r, pods
}

// Adversary: measures (asserts nothing) what n recorded claims and n
// allocations cost Sweep, where the kubelet names them all (every
// reclaim period, 30 s), and what it costs to release them all at once
// and to record them one by one (Rebuild after a reboot: two Puts per
// claim, each writing the whole file). ADVERSARY_SCALE=1000,10000 sets
// the sizes; unset, the test is skipped.
func TestSweepAdversaryScale(t *testing.T) {
	sizes := os.Getenv("ADVERSARY_SCALE")
	if sizes == "" {
		t.Skip("ADVERSARY_SCALE unset")
	}
	for _, s := range splitComma(sizes) {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(s, func(t *testing.T) {
			r, pods := scaleRig(t, n)
			ctx := context.Background()
			r.p.Grace = time.Hour
			start := time.Now()
			if err := r.p.Sweep(ctx, pods); err != nil {
				t.Fatal(err)
			}
			t.Logf("n=%d: Sweep, all named: %v", n, time.Since(start))
			start = time.Now()
			named := r.p.namedClaims(pods)
			t.Logf("n=%d: namedClaims alone: %v (%d)", n, time.Since(start), len(named))

			start = time.Now()
			fresh := &Checkpoint{path: r.ckpt + ".fresh", claims: map[types.UID]Claim{}}
			puts := min(n, 2000)
			for _, uid := range r.p.Checkpoint.UIDs()[:puts] {
				rec, _ := r.p.Checkpoint.Get(uid)
				if err := fresh.Put(uid, rec); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("n=%d: %d Puts into a growing checkpoint: %v", n, puts, time.Since(start))

			var all []resourceapi.ResourceClaim
			for _, uid := range r.p.Checkpoint.UIDs() {
				all = append(all, reserved(uid, result{"cdi.local", "n/tty-generic", r.devices[0]}))
			}
			claims := inAPI(all...)
			start = time.Now()
			if err := r.p.Rebuild(ctx, given(Truth{Claims: claims, Pods: pods})); err != nil {
				t.Fatal(err)
			}
			t.Logf("n=%d: Rebuild, every claim recorded and named (ADD without a process): %v", n, time.Since(start))
			if n <= 3000 {
				lost := r.preparer(t)
				for _, p := range r.pools {
					p.Plugin.Exec = synthetic{list: r.pools[0].Plugin.Exec.(synthetic).list, add: r.pools[0].Plugin.Exec.(synthetic).add}
				}
				lost.Checkpoint = &Checkpoint{path: r.ckpt + ".lost", claims: map[types.UID]Claim{}}
				start = time.Now()
				if err := lost.Rebuild(ctx, given(Truth{Claims: claims, Pods: pods})); err != nil {
					t.Fatal(err)
				}
				t.Logf("n=%d: Rebuild, the checkpoint lost, every claim named (ADD without a process): %v", n, time.Since(start))
			}

			release := min(n, 2000)
			for uid := range pods.Claims {
				if len(pods.Claims) <= n-release {
					break
				}
				delete(pods.Claims, uid)
			}
			r.p.Grace = 0
			start = time.Now()
			if err := r.p.Sweep(ctx, pods); err != nil {
				t.Fatal(err)
			}
			t.Logf("n=%d: Sweep releasing %d of them (DEL without a process): %v", n, n-len(r.p.Checkpoint.UIDs()), time.Since(start))
		})
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

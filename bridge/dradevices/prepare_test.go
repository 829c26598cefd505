package dradevices

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cdiexec/cdi/bridge/cdispec"
	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/plugins/exectest"
	"github.com/cdiexec/cdi/spec"
)

// pluginDir holds the real generic-tty, drm and endpoint plugins, built
// once.
var pluginDir string

func TestMain(m *testing.M) {
	exectest.MainDir(m, &pluginDir, "github.com/cdiexec/cdi/plugins/generic-tty", "github.com/cdiexec/cdi/plugins/drm",
		"github.com/cdiexec/cdi/plugins/endpoint")
}

// rig is a Preparer over the fixture host's terminals tty41 to tty44,
// served by the real generic-tty plugin, and with withGPUs its GPUs too,
// served by the real drm plugin.
type rig struct {
	p       *Preparer
	pools   []discovery.Pool
	cdiDir  string
	ckpt    string
	devices []string // DRA device names of the terminals
	// stateDir is the terminals' plugin's state directory.
	stateDir string
}

// withGPUs adds the fixture's GPUs to a rig: 0000:03:00.0 and
// 0000:41:00.0 on NUMA node 0, 0000:81:00.0 on node 1, 0000:00:02.0 on
// none the host knows.
const withGPUs = true

func newRig(t *testing.T, capacity int, gpus ...bool) *rig {
	t.Helper()
	confDir, stateDir := t.TempDir(), t.TempDir()
	writeDropIn(t, confDir, "tty.d/generic.conf", exectest.Conf(t, "0.1.0", "tty", "generic-tty", map[string]any{
		"root": exectest.FixtureRoot(t), "stateDir": stateDir, "num_system_reserved": 40, "capacity": capacity,
	}))
	if len(gpus) > 0 && gpus[0] {
		writeDropIn(t, confDir, "gpu.d/drm.conf", exectest.Conf(t, "0.1.0", "gpu", "drm", map[string]any{
			"root": exectest.FixtureRoot(t), "stateDir": t.TempDir(),
		}))
	}
	pools, err := (&discovery.Discoverer{ConfDir: confDir, PluginDirs: []string{pluginDir}}).Discover(context.Background())
	if err != nil || len(pools) != 1+len(gpus) {
		t.Fatalf("discovery: %v, %v", pools, err)
	}
	r := &rig{pools: pools, cdiDir: t.TempDir(), ckpt: filepath.Join(t.TempDir(), "claims.json"), stateDir: stateDir}
	for _, d := range r.pool(t, "tty-generic").Devices {
		r.devices = append(r.devices, DeviceName(d.ID))
	}
	r.p = r.preparer(t)
	return r
}

func writeDropIn(t *testing.T, confDir, path string, conf []byte) {
	t.Helper()
	path = filepath.Join(confDir, path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) pool(t *testing.T, name string) discovery.Pool {
	t.Helper()
	for _, p := range r.pools {
		if p.Name == name && len(p.Devices) > 0 {
			return p
		}
	}
	t.Fatalf("no pool %s with devices among %v", name, r.pools)
	return discovery.Pool{}
}

// preparer is a Preparer as a fresh start of the bridge makes it: the
// checkpoint read from its file, and the first discovery's pools set.
func (r *rig) preparer(t *testing.T) *Preparer {
	t.Helper()
	p := r.undiscovered(t)
	p.SetPools(r.pools)
	return p
}

// undiscovered is preparer before the first discovery.
func (r *rig) undiscovered(t *testing.T) *Preparer {
	t.Helper()
	ckpt, err := LoadCheckpoint(r.ckpt)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := cdispec.Open(r.cdiDir, "cdi.local")
	if err != nil {
		t.Fatal(err)
	}
	return &Preparer{Driver: "cdi.local", Node: "n", CDI: dir, Vendor: "cdi.local", Checkpoint: ckpt}
}

// allocations lists the terminals' plugin's request-ids.
func (r *rig) allocations(t *testing.T) []string {
	t.Helper()
	return r.requestIDs(t, "tty-generic")
}

// requestIDs lists the request-ids of pool's plugin (LIST).
func (r *rig) requestIDs(t *testing.T, pool string) []string {
	t.Helper()
	l, err := r.pool(t, pool).Plugin.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range l.Allocations {
		ids = append(ids, a.RequestID)
	}
	return ids
}

func (r *rig) spec(t *testing.T, uid types.UID) (*specs.Spec, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(r.cdiDir, SpecFile(uid)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s, true
}

type result struct{ driver, pool, device string }

func claim(uid types.UID, results ...result) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: string(uid), UID: uid},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	for i, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: fmt.Sprintf("r%d", i), Driver: r.driver, Pool: r.pool, Device: r.device,
		})
	}
	return c
}

func TestPrepareRunsADDAndWritesTheClaimsSpec(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"other.example.com", "x", "y"},
		result{"cdi.local", "n/tty-generic", r.devices[1]})
	devs, err := r.p.Prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name != r.devices[0] || devs[1].Name != r.devices[1] || devs[1].Requests[0] != "r2" {
		t.Fatalf("devices %+v, want this driver's two", devs)
	}
	if got := r.allocations(t); fmt.Sprint(got) != "[u1-0 u1-1]" {
		t.Errorf("plugin allocations %v, want u1-0 and u1-1", got)
	}
	s, ok := r.spec(t, "u1")
	if !ok || s.Kind != "cdi.local/claim" || len(s.Devices) != 2 || len(s.Devices[0].ContainerEdits.DeviceNodes) != 1 {
		t.Fatalf("spec %+v", s)
	}
	if devs[0].CDIIDs[0] != "cdi.local/claim=u1-0" {
		t.Errorf("CDI ids %v", devs[0].CDIIDs)
	}

	t.Run("again: the same devices, the ADDs repeated, the spec rewritten", func(t *testing.T) {
		if err := os.Remove(filepath.Join(r.cdiDir, SpecFile("u1"))); err != nil {
			t.Fatal(err)
		}
		again, err := r.p.Prepare(ctx, c)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(devs) {
			t.Errorf("Prepare again = %+v, %v; want %+v", again, err, devs)
		}
		if _, ok := r.spec(t, "u1"); !ok {
			t.Error("spec not rewritten")
		}
	})
	t.Run("unprepare: DEL, the spec removed, twice", func(t *testing.T) {
		for range 2 {
			if err := r.p.Unprepare(ctx, "u1"); err != nil {
				t.Fatal(err)
			}
		}
		if got := r.allocations(t); len(got) != 0 {
			t.Errorf("plugin allocations %v after Unprepare", got)
		}
		if _, ok := r.spec(t, "u1"); ok {
			t.Error("spec still there")
		}
		if _, ok := r.p.Checkpoint.Get("u1"); ok {
			t.Error("claim still checkpointed")
		}
	})
}

func TestPrepareIsAllOrNothing(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	// The scheduler never gives one whole device twice; a second ADD
	// pinned to a device of capacity 1 fails as a broken allocation would.
	c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}, result{"cdi.local", "n/tty-generic", r.devices[0]})
	if _, err := r.p.Prepare(ctx, c); err == nil {
		t.Fatal("Prepare succeeded with one slot given twice")
	}
	if got := r.allocations(t); len(got) != 0 {
		t.Errorf("plugin allocations %v after a failed Prepare", got)
	}
	if _, ok := r.p.Checkpoint.Get("u1"); ok {
		t.Error("a failed claim stays checkpointed")
	}
	if _, ok := r.spec(t, "u1"); ok {
		t.Error("a failed claim has a spec")
	}
}

func TestPrepareSharesOfOneDevice(t *testing.T) {
	r := newRig(t, 2)
	ctx := context.Background()
	for _, uid := range []types.UID{"u1", "u2"} {
		if _, err := r.p.Prepare(ctx, claim(uid, result{"cdi.local", "n/tty-generic", r.devices[0]})); err != nil {
			t.Fatalf("claim %s: %v", uid, err)
		}
	}
	if got := r.allocations(t); fmt.Sprint(got) != "[u1-0 u2-0]" {
		t.Errorf("plugin allocations %v, want one per claim on the device's two slots", got)
	}
}

func TestPrepareRefuses(t *testing.T) {
	r := newRig(t, 1)
	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  error
	}{
		"another node's pool": {claim("u1", result{"cdi.local", "m/tty-generic", r.devices[0]}), ErrNotAllocatable},
		"an unknown device":   {claim("u1", result{"cdi.local", "n/tty-generic", "tty99"}), ErrNotAllocatable},
		"an unknown pool":     {claim("u1", result{"cdi.local", "n/gpu-drm", r.devices[0]}), ErrNotAllocatable},
		"not allocated":       {&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}, ErrNotAllocatable},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := r.p.Prepare(context.Background(), tc.claim); !errors.Is(err, tc.want) {
				t.Errorf("Prepare = %v, want %v", err, tc.want)
			}
			if got := r.allocations(t); len(got) != 0 {
				t.Errorf("plugin allocations %v", got)
			}
		})
	}
	t.Run("no discovery before the call's end", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]})
		if _, err := r.undiscovered(t).Prepare(ctx, c); !errors.Is(err, ErrNotReady) {
			t.Errorf("Prepare = %v, want ErrNotReady", err)
		}
	})
}

// The kubelet calls the driver once it has registered, which may be
// before the bridge's first discovery (at every start, and at once when
// a rolling update's new bridge registers): the claim waits for the
// pools and is prepared, rather than failing and waiting for the
// kubelet's retry.
func TestPrepareWaitsForTheFirstDiscovery(t *testing.T) {
	r := newRig(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	afterDiscovery := func(call func(p *Preparer) error) error {
		p := r.undiscovered(t)
		done := make(chan error, 1)
		go func() { done <- call(p) }()
		time.Sleep(100 * time.Millisecond) // the call waits: nothing to tell it by but time
		p.SetPools(r.pools)
		return <-done
	}
	if err := afterDiscovery(func(p *Preparer) error {
		_, err := p.Prepare(ctx, claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]}))
		return err
	}); err != nil {
		t.Fatalf("Prepare before the first discovery: %v", err)
	}
	if got := r.allocations(t); !slices.Equal(got, []string{"u1-0"}) {
		t.Errorf("plugin allocations %v, want u1-0", got)
	}
	if err := afterDiscovery(func(p *Preparer) error { return p.Unprepare(ctx, "u1") }); err != nil {
		t.Fatalf("Unprepare before the first discovery: %v", err)
	}
	if got := r.allocations(t); len(got) != 0 {
		t.Errorf("plugin allocations %v after Unprepare", got)
	}
}

func TestCheckpointSurvivesARestart(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]})
	devs, err := r.p.Prepare(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// A reboot: the spec directory, a tmpfs, is empty; the checkpoint is not.
	if err := os.Remove(filepath.Join(r.cdiDir, SpecFile("u1"))); err != nil {
		t.Fatal(err)
	}
	after := r.preparer(t)
	if err := after.RestoreSpecs(); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.spec(t, "u1"); !ok {
		t.Fatal("RestoreSpecs did not write the prepared claim's spec")
	}
	again, err := after.Prepare(ctx, c)
	if err != nil || fmt.Sprint(again) != fmt.Sprint(devs) {
		t.Errorf("Prepare after the restart = %+v, %v; want %+v", again, err, devs)
	}
	if err := after.Unprepare(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := r.allocations(t); len(got) != 0 {
		t.Errorf("plugin allocations %v after Unprepare by the restarted bridge", got)
	}
}

// The devices of one request carry every one's env, joined; another
// request's stay apart.
func TestClaimSpecJoinsEnvPerRequest(t *testing.T) {
	p := &Preparer{Vendor: "cdi.local"}
	node := []spec.DeviceNode{{HostPath: "/dev/null"}}
	rec := Claim{Devices: []PreparedDevice{
		{Request: "cams", RequestID: "u-0", Result: &spec.AddResult{Env: map[string]string{"URL": "a", "ONE": "x"}}},
		{Request: "cams/sub", RequestID: "u-1", Result: &spec.AddResult{Env: map[string]string{"URL": "b"}}},
		{Request: "other", RequestID: "u-2", Result: &spec.AddResult{Env: map[string]string{"URL": "c"}, DeviceNodes: node}},
		{Request: "cams", RequestID: "u-3"}, // not added yet: no device
	}}
	s := p.claimSpec(rec)
	got := map[string]string{}
	for _, d := range s.Devices {
		got[d.Name] = fmt.Sprint(d.ContainerEdits.Env)
	}
	want := map[string]string{"u-0": "[ONE=x URL=a,b]", "u-1": "[ONE=x URL=a,b]", "u-2": "[URL=c]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("env by device %v, want %v", got, want)
	}
}

// A claim's spec file that a full spec directory refuses fails Prepare
// and leaves nothing there (the CDI library left its temporary file at
// each attempt, and the kubelet retries a Prepare); with room again, the
// next Prepare writes it.
func TestPrepareOnAFullSpecDirectory(t *testing.T) {
	r := newRig(t, 1)
	r.cdiDir = exectest.FullDisk(t, func(string) {})
	r.p = r.preparer(t)
	c := claim("u1", result{"cdi.local", "n/tty-generic", r.devices[0]})
	for range 3 {
		if _, err := r.p.Prepare(context.Background(), c); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Prepare on a full spec directory: %v, want ENOSPC", err)
		}
	}
	if entries, _ := os.ReadDir(r.cdiDir); len(entries) != 1 || entries[0].Name() != "filler" {
		t.Errorf("the full spec directory holds %v, want the filler alone", entries)
	}
	if err := os.Remove(filepath.Join(r.cdiDir, "filler")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.p.Prepare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(r.cdiDir); len(entries) != 1 || entries[0].Name() != SpecFile("u1") {
		t.Errorf("the spec directory holds %v, want the claim's spec alone", entries)
	}
}

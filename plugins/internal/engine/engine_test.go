package engine

import (
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/plugins/internal/store"
	"github.com/cdiexec/cdi/plugins/internal/store/fake"
	"github.com/cdiexec/cdi/skel"
	"github.com/cdiexec/cdi/spec"
)

// rig is an engine over a fixed inventory and the fake store: the
// allocation rules without a device tree or a disk.
type rig struct {
	t      *testing.T
	plugin skel.Plugin
	store  *fake.Store
	bootID string
	inv    Inventory
	config *spec.Config
}

func intp(n int) *int { return &n }

// newRig serves "gpu" (gpu0, gpu1 on NUMA 0; gpu2, gpu3 on NUMA 1) and
// "gpu-render" (render0); "gpu-memory" is not served. args are appended to the config's args.
func newRig(t *testing.T, args string) *rig {
	t.Helper()
	gpu := spec.ResourceSpec{Type: "gpu"}
	r := &rig{t: t, store: fake.New("boot-1"), bootID: "boot-1"}
	for i, numa := range []int{0, 0, 1, 1} {
		id := "gpu" + string(rune('0'+i))
		r.inv.Devices = append(r.inv.Devices, Device{ID: id, Resource: gpu, NUMANode: intp(numa), Healthy: true,
			Nodes: []spec.DeviceNode{{HostPath: "/dev/" + id}}})
	}
	render := spec.ResourceSpec{Type: "gpu", Subtype: "render"}
	r.inv.Devices = append(r.inv.Devices, Device{ID: "render0", Resource: render, NUMANode: intp(0), Healthy: true,
		Nodes: []spec.DeviceNode{{HostPath: "/dev/dri/renderD128"}}})
	r.inv.Resources = []spec.ResourceSpec{gpu, render}
	cfg, err := spec.ParseConfig([]byte(`{"cdiVersion":"0.1.0","name":"t","type":"gpu","plugin":"test","args":{"stateDir":"/state"` + args + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	r.config = cfg
	deps := Deps{
		OpenStore: func(string, string) store.Store { return r.store },
		BootID:    func() string { return r.bootID },
		Now:       func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	r.plugin = PluginWith(Family{Name: "test", Discover: func(*Host) (*Inventory, error) {
		inv := r.inv // a copy per call, as discovery makes
		inv.Devices = slices.Clone(r.inv.Devices)
		return &inv, nil
	}}, deps)
	return r
}

// req is one ADD's parameters.
type req struct {
	id, request string
	numa        []int
	devices     []string
}

func (r *rig) args(q req) *skel.Args {
	r.t.Helper()
	a := &skel.Args{Command: "ADD", Version: "0.1.0", Config: r.config, RequestID: q.id, NUMANodes: q.numa, Devices: q.devices, Stderr: io.Discard}
	if q.request != "" {
		var err error
		if a.Request, err = spec.ParseRequest(q.request); err != nil {
			r.t.Fatal(err)
		}
	}
	return a
}

func (r *rig) add(q req) (*spec.AddResult, error) { return r.plugin.Add(r.args(q)) }

// held is every device slot the state holds, as "device/slot", per
// request-id.
func (r *rig) held() map[string][]string {
	out := map[string][]string{}
	for id, rec := range r.store.State().Allocations {
		for _, u := range rec.Result.Units {
			out[id] = append(out[id], u.Device+"/"+string(rune('0'+u.Slot)))
		}
		slices.Sort(out[id])
	}
	return out
}

func devices(res *spec.AddResult) []string {
	var out []string
	for _, u := range res.Units {
		out = append(out, u.Device)
	}
	slices.Sort(out)
	return out
}

func TestAddPicks(t *testing.T) {
	tests := []struct {
		name     string
		args     string
		before   []req // made first, must succeed
		q        req
		want     []string // devices, sorted
		wantNUMA []int
	}{
		{"discovery order among equals", "", nil, req{id: "r", request: "gpu:1"}, []string{"gpu0"}, []int{0}},
		{"NUMA first", "", nil, req{id: "r", request: "gpu:2", numa: []int{1}}, []string{"gpu2", "gpu3"}, []int{1}},
		{"NUMA preferred, not required", "", nil, req{id: "r", request: "gpu:3", numa: []int{1}}, []string{"gpu0", "gpu2", "gpu3"}, []int{0, 1}},
		{"pinned", "", nil, req{id: "r", request: "gpu:1", devices: []string{"gpu3"}}, []string{"gpu3"}, []int{1}},
		{"pin beats NUMA", "", nil, req{id: "r", request: "gpu:1", numa: []int{1}, devices: []string{"gpu0"}}, []string{"gpu0"}, []int{0}},
		{"skips full devices", "", []req{{id: "a", request: "gpu:2"}}, req{id: "r", request: "gpu:2"}, []string{"gpu2", "gpu3"}, []int{1}},
		{"most free slots first", `,"capacity":2`, []req{{id: "a", request: "gpu:1"}}, req{id: "r", request: "gpu:1"}, []string{"gpu1"}, []int{0}},
		{"shares once all are used", `,"capacity":2`, []req{{id: "a", request: "gpu:4"}}, req{id: "r", request: "gpu:1"}, []string{"gpu0"}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.args)
			for _, q := range tt.before {
				if _, err := r.add(q); err != nil {
					t.Fatal(err)
				}
			}
			res, err := r.add(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := devices(res); !slices.Equal(got, tt.want) {
				t.Errorf("devices %v, want %v", got, tt.want)
			}
			if !slices.Equal(res.NUMALocality, tt.wantNUMA) {
				t.Errorf("numa_locality %v, want %v", res.NUMALocality, tt.wantNUMA)
			}
		})
	}
}

// Every failing ADD leaves the state exactly as it was: nothing of a
// request that cannot be met in its entirety is kept.
func TestAddRefusals(t *testing.T) {
	tests := []struct {
		name string
		q    req
		code spec.Code
	}{
		{"more than there are", req{id: "r", request: "gpu:5"}, spec.CodeInsufficientResources},
		{"all or nothing across items", req{id: "r", request: "gpu:2,gpu-render:2"}, spec.CodeInsufficientResources},
		{"unserved sub-resource", req{id: "r", request: "gpu-memory:1"}, spec.CodeUnsupportedResource},
		{"unknown pinned device", req{id: "r", request: "gpu:1", devices: []string{"gpu9"}}, spec.CodeUnknownDevice},
		{"pin narrower than the request", req{id: "r", request: "gpu:2", devices: []string{"gpu3"}}, spec.CodeInsufficientResources},
		{"request-id reused for another request", req{id: "a", request: "gpu:2"}, spec.CodeRequestConflict},
		{"request-id reused with other NUMA", req{id: "a", request: "gpu:1", numa: []int{1}}, spec.CodeRequestConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "")
			if _, err := r.add(req{id: "a", request: "gpu:1"}); err != nil {
				t.Fatal(err)
			}
			before, saves := r.held(), r.store.Saves()
			_, err := r.add(tt.q)
			if got := spec.CodeOf(err); got != tt.code {
				t.Fatalf("error %v (code %d), want code %d", err, got, tt.code)
			}
			if after := r.held(); !equalHeld(before, after) || r.store.Saves() != saves {
				t.Errorf("a refused ADD changed the state: %v -> %v", before, after)
			}
		})
	}
}

func equalHeld(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// A repeated identical ADD (a caller retrying after a crash) returns the
// first result and takes nothing more; the item order does not matter.
func TestAddRepeated(t *testing.T) {
	r := newRig(t, `,"capacity":2`)
	first, err := r.add(req{id: "a", request: "gpu:2"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.add(req{id: "a", request: "gpu:2"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(devices(first), devices(again)) || len(r.held()["a"]) != 2 {
		t.Fatalf("repeat gave %v after %v; state %v", devices(again), devices(first), r.held())
	}
}

// A reboot (a new boot id) releases what was allocated before it.
func TestBootDrop(t *testing.T) {
	r := newRig(t, "")
	if _, err := r.add(req{id: "before", request: "gpu:4"}); err != nil {
		t.Fatal(err)
	}
	r.bootID = "boot-2"
	r.store = storeFrom(t, r.store, "boot-2")
	if _, err := r.add(req{id: "after", request: "gpu:4"}); err != nil {
		t.Fatalf("the devices held before the reboot are still taken: %v", err)
	}
	if held := r.held(); len(held) != 1 || held["after"] == nil {
		t.Errorf("state after the reboot: %v", held)
	}
}

// storeFrom is a fake store for bootID holding old's state, as the same
// file read after a reboot.
func storeFrom(t *testing.T, old *fake.Store, bootID string) *fake.Store {
	s := fake.New(bootID)
	if err := s.SetState(old.State()); err != nil {
		t.Fatal(err)
	}
	return s
}

// DEL releases all of a request-id; GC exactly the ids outside the valid
// set; LIST reports what ADD returned.
func TestReleaseAndList(t *testing.T) {
	r := newRig(t, "")
	results := map[string]*spec.AddResult{}
	for _, id := range []string{"a", "b", "c"} {
		res, err := r.add(req{id: id, request: "gpu:1"})
		if err != nil {
			t.Fatal(err)
		}
		results[id] = res
	}
	list, err := r.plugin.List(&skel.Args{Config: r.config, Version: "0.1.0", Stderr: io.Discard})
	if err != nil || len(list.Allocations) != 3 {
		t.Fatalf("LIST = %+v, %v", list, err)
	}
	for _, al := range list.Allocations {
		if !slices.Equal(devices(&al.Result), devices(results[al.RequestID])) || al.Request != "gpu:1" {
			t.Errorf("LIST says %s holds %v (%s), ADD returned %v", al.RequestID, devices(&al.Result), al.Request, devices(results[al.RequestID]))
		}
	}
	if err := r.plugin.Del(&skel.Args{Config: r.config, RequestID: "b", Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	if err := r.plugin.Del(&skel.Args{Config: r.config, RequestID: "b", Stderr: io.Discard}); spec.CodeOf(err) != spec.CodeUnknownRequestID {
		t.Errorf("second DEL: %v, want code 5", err)
	}
	gc, err := r.plugin.GC(&skel.Args{Config: r.config, ValidRequestIDs: []string{"a", "zzz"}, Stderr: io.Discard})
	if err != nil || !slices.Equal(gc.Released, []string{"c"}) {
		t.Fatalf("GC = %+v, %v; want only c released", gc, err)
	}
	if held := r.held(); len(held) != 1 || held["a"] == nil {
		t.Errorf("left after DEL and GC: %v", held)
	}
}

func TestParseCommonArgs(t *testing.T) {
	tests := []struct {
		args string
		ok   bool
	}{
		{``, true},
		{`,"capacity":1024,"cdiKind":"example.com/gpu","root":"/fixture"`, true},
		{`,"capacity":0`, false},
		{`,"capacity":1025`, false},
		{`,"capacity":1.5`, false},
		{`,"capacity":"2"`, false},
		{`,"root":"relative"`, false},
		{`,"root":""`, false},
		{`,"cdiKind":"gpu"`, false},
		{`,"cdiKind":"example.com/"`, false},
		{`,"cdiKind":"-x.com/gpu"`, false},
		// CDI's own rules: a letter first, a letter or digit last.
		{`,"cdiKind":"example_corp.com/gpu.v2"`, true},
		{`,"cdiKind":"a/b"`, true},
		{`,"cdiKind":"3com.example/gpu_"`, false},
		{`,"cdiKind":"3com.example/gpu"`, false},
		{`,"cdiKind":"example.com/gpu_"`, false},
		{`,"cdiKind":"example.com/1gpu"`, false},
		{`,"cdiKind":"example.com./gpu"`, false},
		{`,"cdiKind":"example.com/gpu-"`, false},
		{`,"cdiKind":"example.com/g/pu"`, false},
		{`,"cdiKind":"exa mple.com/gpu"`, false},
		{`,"cdiKind":"/gpu"`, false},
		{`,"root":null`, false},
		{`,"capacity":null`, false},
		{`,"cdiKind":null`, false},
		{`,"stateDir":""`, false},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			cfg, err := spec.ParseConfig([]byte(`{"cdiVersion":"0.1.0","name":"t","type":"gpu","plugin":"test","args":{"stateDir":"/s"` + tt.args + `}}`))
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseCommonArgs(cfg)
			if (err == nil) != tt.ok || (err != nil && spec.CodeOf(err) != spec.CodeInvalidConfig) {
				t.Errorf("parseCommonArgs: %v, want ok %v (or code 8)", err, tt.ok)
			}
		})
	}
}

// TestInfoCountsTheType checks that INFO counts the configuration's type
// whatever the family serves, as SPEC.md requires: 0 when it serves only
// subtypes, and never a count it does not owe.
func TestInfoCountsTheType(t *testing.T) {
	render := spec.ResourceSpec{Type: "gpu", Subtype: "render"}
	tests := []struct {
		name      string
		resources []spec.ResourceSpec
		want      map[string]int
	}{
		{"type and a subtype", []spec.ResourceSpec{{Type: "gpu"}, render}, map[string]int{"gpu": 4, "gpu-render": 1}},
		{"only a subtype", []spec.ResourceSpec{render}, map[string]int{"gpu": 0, "gpu-render": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "")
			r.inv.Resources = tt.resources
			if len(tt.resources) == 1 {
				r.inv.Devices = r.inv.Devices[4:] // render0 alone
			}
			info, err := r.plugin.Info(&skel.Args{Command: "INFO", Version: "0.1.0", Config: r.config, Stderr: io.Discard})
			if err != nil || !maps.Equal(info.Counts, tt.want) {
				t.Fatalf("INFO counts %v, %v; want %v", info, err, tt.want)
			}
		})
	}
}

// ADD hands out no device whose node is not a device node and says which
// it skipped, but stats only the nodes of the devices it considers: here
// gpu3's node is as bad as gpu0's, and only the ADD that needs gpu3
// finds out.
func TestAddChecksTheNodesItConsiders(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Under a root other than "/", an empty file stands for a device node;
	// one with content is a regular file.
	for node, content := range map[string]string{"gpu0": "x", "gpu1": "", "gpu2": "", "gpu3": "x"} {
		if err := os.WriteFile(filepath.Join(root, "dev", node), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		q       req
		want    []string
		code    spec.Code
		skipped []string
	}{
		{"the first that passes", req{id: "a", request: "gpu:1"}, []string{"gpu1"}, 0, []string{"gpu0"}},
		{"more than pass", req{id: "a", request: "gpu:3"}, nil, spec.CodeInsufficientResources, []string{"gpu0", "gpu3"}},
		{"pinned to one that fails", req{id: "a", request: "gpu:1", devices: []string{"gpu0"}}, nil, spec.CodeUnknownDevice, []string{"gpu0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, `,"root":"`+root+`"`)
			var stderr bytes.Buffer
			a := r.args(tt.q)
			a.Stderr = &stderr
			res, err := r.plugin.Add(a)
			if spec.CodeOf(err) != tt.code || (err == nil && !slices.Equal(devices(res), tt.want)) {
				t.Fatalf("ADD gave %+v, %v; want devices %v or code %d", res, err, tt.want, tt.code)
			}
			var skipped []string
			for _, id := range []string{"gpu0", "gpu1", "gpu2", "gpu3"} {
				if strings.Contains(stderr.String(), `skipped device "`+id+`"`) {
					skipped = append(skipped, id)
				}
			}
			if !slices.Equal(skipped, tt.skipped) {
				t.Errorf("skipped %v, want %v; stderr:\n%s", skipped, tt.skipped, stderr.String())
			}
		})
	}
}

// What discovery is told it may leave out: properties and NUMA lookups
// for every ADD, and
// the devices of resource-specs an ADD does not name unless it pins
// devices, which must then be found wherever they are.
func TestHostNarrowsDiscoveryForAdd(t *testing.T) {
	r := newRig(t, "")
	var seen *Host
	r.plugin = PluginWith(Family{Name: "test", Discover: func(h *Host) (*Inventory, error) {
		seen = h
		inv := r.inv
		inv.Devices = slices.Clone(r.inv.Devices)
		return &inv, nil
	}}, Deps{OpenStore: func(string, string) store.Store { return r.store }, BootID: func() string { return "boot-1" }, Now: time.Now})
	gpu := spec.ResourceSpec{Type: "gpu"}
	for _, tt := range []struct {
		name           string
		call           func() error
		skipProperties bool
		wanted         []spec.ResourceSpec
	}{
		{"ADD", func() error { _, err := r.add(req{id: "a", request: "gpu:1"}); return err }, true, []spec.ResourceSpec{gpu}},
		{"ADD pinning", func() error { _, err := r.add(req{id: "b", request: "gpu:1", devices: []string{"gpu1"}}); return err }, true, nil},
		{"INFO", func() error {
			_, err := r.plugin.Info(&skel.Args{Command: "INFO", Version: "0.1.0", Config: r.config, Stderr: io.Discard})
			return err
		}, false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err != nil {
				t.Fatal(err)
			}
			if seen.SkipProperties != tt.skipProperties || seen.DeferNUMA != tt.skipProperties || !slices.Equal(seen.Wanted, tt.wanted) {
				t.Errorf("SkipProperties %v, DeferNUMA %v, Wanted %v; want %v, %v, %v",
					seen.SkipProperties, seen.DeferNUMA, seen.Wanted, tt.skipProperties, tt.skipProperties, tt.wanted)
			}
		})
	}
}

// Devices whose NUMA node the family defers (Device.LookUpNUMA) are
// picked as if it were known, and looked up only where ADD needs it:
// every candidate when NUMA nodes are asked for, else the picked only.
func TestAddLooksUpDeferredNUMA(t *testing.T) {
	tests := []struct {
		name       string
		q          req
		want       []string
		wantNUMA   []int
		wantLooked []string
	}{
		{"no NUMA asked for", req{id: "r", request: "gpu:1"}, []string{"gpu0"}, []int{0}, []string{"gpu0"}},
		{"NUMA asked for", req{id: "r", request: "gpu:1", numa: []int{1}}, []string{"gpu2"}, []int{1}, []string{"gpu0", "gpu1", "gpu2", "gpu3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "")
			var looked []string
			for i := range r.inv.Devices {
				d := &r.inv.Devices[i]
				numa, id := d.NUMANode, d.ID
				d.NUMANode, d.LookUpNUMA = nil, func() *int { looked = append(looked, id); return numa }
			}
			res, err := r.add(tt.q)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(looked)
			if !slices.Equal(devices(res), tt.want) || !slices.Equal(res.NUMALocality, tt.wantNUMA) || !slices.Equal(looked, tt.wantLooked) {
				t.Errorf("devices %v, numa_locality %v, looked up %v; want %v, %v, %v",
					devices(res), res.NUMALocality, looked, tt.want, tt.wantNUMA, tt.wantLooked)
			}
		})
	}
}

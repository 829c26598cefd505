package kubelet

import (
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"

	"github.com/cdiexec/cdi/bridge/node"
	"github.com/cdiexec/cdi/spec"
)

// grant is one slot a container got, as the manager recorded it.
type grant struct {
	resource string // the resource the kubelet allocated from
	id       string // the device id the kubelet holds: a slot or a vdev
	slot     string
	device   device
}

// granted checks what the kubelet would give a container against the
// devices the manager assigned it, and returns one grant per assigned
// id. Every id must have its slot annotation (the slot itself for an
// Instance-level id, "C:<vdev>:<slot>" for a Configuration-level one);
// the device specs, CDI devices and environment must be exactly those of
// the slots' devices; one container request never gets two slots of one
// device through one pool.
func (k *kubelet) granted(t *testing.T, pod *v1.Pod, name string) []grant {
	t.Helper()
	opts := k.runOptions(t, pod, name)
	annotations := map[string]string{}
	for _, a := range opts.Annotations {
		annotations[a.Name] = a.Value
	}
	var grants []grant
	for res, ids := range k.m.GetDevices(string(pod.UID), name) {
		for id := range ids {
			g := grant{resource: res, id: id}
			var ok bool
			if g.slot, g.device, ok = slotFor(annotations, res, id); !ok {
				t.Fatalf("%s/%s: no slot annotation for %s %s among %v", pod.Name, name, res, id, annotations)
			}
			grants = append(grants, g)
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].slot < grants[j].slot })
	if len(annotations) != len(grants) {
		t.Errorf("%s/%s: %d annotations for %d devices: %v", pod.Name, name, len(annotations), len(grants), annotations)
	}
	checkDistinct(t, pod.Name+"/"+name, grants)
	checkRunOptions(t, pod.Name+"/"+name, opts, grants)
	return grants
}

// slotFor finds the slot annotation of one id the kubelet holds for res
// and the device of that slot. An Instance-level id is its slot; a vdev's
// annotation must name a slot of the vdev's pool, since vdev ids are per
// pool: two pools of one container can both have a vdev "0".
func slotFor(annotations map[string]string, res, id string) (string, device, bool) {
	if d, ok := deviceOfSlot(id); ok && res == d.resource() {
		return id, d, annotations[node.SlotAnnotation(domain, id)] == id
	}
	for key, value := range annotations {
		slot, ok := strings.CutPrefix(key, node.SlotAnnotation(domain, ""))
		d, known := deviceOfSlot(slot)
		if ok && known && res == pool(d.pool) && value == "C:"+id+":"+slot {
			return slot, d, true
		}
	}
	return "", device{}, false
}

func checkDistinct(t *testing.T, who string, grants []grant) {
	t.Helper()
	seen := map[string]string{}
	for _, g := range grants {
		key := g.resource + " " + g.device.id
		if other, dup := seen[key]; dup && g.resource == pool(g.device.pool) {
			t.Errorf("%s: %s got two slots of %s: %s and %s", who, g.resource, g.device.id, other, g.slot)
		}
		seen[key] = g.slot
	}
}

// checkRunOptions compares the container's device specs, mounts, CDI
// devices and environment with those of its grants' devices. Every node
// comes by its device's CDI name (the bridge wrote the spec files), so no
// device spec is expected; each variable holds the values of every
// device that sets it, joined, compared here as a set.
func checkRunOptions(t *testing.T, who string, opts *devicemanager.DeviceRunContainerOptions, grants []grant) {
	t.Helper()
	wantDevices, wantCDI, wantEnv := map[string]bool{}, map[string]bool{}, map[string]string{}
	for _, g := range grants {
		if name := g.device.cdiName(); name != "" {
			wantCDI[name] = true
		}
		wantEnv = spec.JoinValues(wantEnv, g.device.env)
	}
	gotDevices, gotCDI, gotEnv := map[string]bool{}, map[string]bool{}, map[string]string{}
	for _, d := range opts.Devices {
		gotDevices[d.PathOnHost+" -> "+d.PathInContainer+" "+d.Permissions] = true
	}
	for _, c := range opts.CDIDevices {
		gotCDI[c.Name] = true
	}
	for _, e := range opts.Envs {
		gotEnv[e.Name] = e.Value
	}
	gotEnv, wantEnv = valueSets(gotEnv), valueSets(wantEnv)
	if got, want := slices.Sorted(maps.Keys(gotDevices)), slices.Sorted(maps.Keys(wantDevices)); !slices.Equal(got, want) {
		t.Errorf("%s: device specs %q, want %q", who, got, want)
	}
	if got, want := slices.Sorted(maps.Keys(gotCDI)), slices.Sorted(maps.Keys(wantCDI)); !slices.Equal(got, want) {
		t.Errorf("%s: CDI devices %q, want %q", who, got, want)
	}
	if !maps.Equal(gotEnv, wantEnv) {
		t.Errorf("%s: environment %v, want %v", who, gotEnv, wantEnv)
	}
	if len(opts.Mounts) != 0 {
		t.Errorf("%s: mounts %v, want none", who, opts.Mounts)
	}
}

// valueSets sorts the comma-joined values of each variable, so that two
// environments compare equal whatever order the devices were added in.
func valueSets(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		parts := strings.Split(v, ",")
		slices.Sort(parts)
		out[k] = strings.Join(parts, ",")
	}
	return out
}

// isPluginError reports whether an allocation error is a device plugin's
// answer (a gRPC status) rather than the manager's own refusal.
func isPluginError(err error) bool {
	var s interface{ GRPCStatus() *status.Status }
	return errors.As(err, &s)
}

// deviceIDs lists the devices of grants, sorted.
func deviceIDs(grants []grant) []string {
	ids := map[string]bool{}
	for _, g := range grants {
		ids[g.device.id] = true
	}
	return slices.Sorted(maps.Keys(ids))
}

package node

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cdiexec/cdi/bridge/e2e/node/internal/report"
	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

var instancesGVR = schema.GroupVersionResource{Group: "cdi.local", Version: "v1alpha1", Resource: "instances"}

// dialPodResources connects to the kubelet's PodResources API, the one
// slot reclaim reads too.
func dialPodResources() (podresourcesv1.PodResourcesListerClient, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+podResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return podresourcesv1.NewPodResourcesListerClient(conn), conn, nil
}

// heldDevices returns, by resource name, the device ids the kubelet says
// the pod's containers hold.
func heldDevices(ctx context.Context, pr podresourcesv1.PodResourcesListerClient, ns, pod string) (map[string][]string, error) {
	resp, err := pr.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("PodResources List: %w", err)
	}
	held := map[string][]string{}
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() != ns || p.GetName() != pod {
			continue
		}
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				held[d.GetResourceName()] = append(held[d.GetResourceName()], d.GetDeviceIds()...)
			}
		}
	}
	return held, nil
}

// freeDevices returns the ids of resource that the kubelet may allocate
// and no container holds.
func freeDevices(ctx context.Context, pr podresourcesv1.PodResourcesListerClient, resource string) ([]string, error) {
	alloc, err := pr.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("PodResources GetAllocatableResources: %w", err)
	}
	used, err := pr.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("PodResources List: %w", err)
	}
	inUse := map[string]bool{}
	for _, p := range used.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					inUse[d.GetResourceName()+"/"+id] = true
				}
			}
		}
	}
	var free []string
	for _, d := range alloc.GetDevices() {
		for _, id := range d.GetDeviceIds() {
			if d.GetResourceName() == resource && !inUse[resource+"/"+id] {
				free = append(free, id)
			}
		}
	}
	return free, nil
}

// Instance is what the test reads of an Instance object.
type Instance struct {
	Name, Pool, DeviceID string
	// Usage maps each slot to its holder: "" free, "<node>" an
	// Instance-level claim, "C:<vdev>:<node>" a Configuration-level one.
	Usage map[string]string
}

// Resource is the Instance's own, Instance-level, resource.
func (i Instance) Resource() string { return domain + "/" + i.Name }

// FreeSlots counts the slots nobody holds.
func (i Instance) FreeSlots() int {
	n := 0
	for _, u := range i.Usage {
		if u == "" {
			n++
		}
	}
	return n
}

// listInstances reads every Instance in ns, by name.
func listInstances(ctx context.Context, client dynamic.Interface, ns string) ([]Instance, error) {
	list, err := client.Resource(instancesGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Instances: %w", err)
	}
	out := make([]Instance, 0, len(list.Items))
	for _, obj := range list.Items {
		spec, _ := obj.Object["spec"].(map[string]any)
		i := Instance{Name: obj.GetName(), Usage: map[string]string{}}
		i.Pool, _ = spec["configurationName"].(string)
		i.DeviceID, _ = spec["deviceId"].(string)
		usage, _ := spec["deviceUsage"].(map[string]any)
		for slot, v := range usage {
			i.Usage[slot], _ = v.(string)
		}
		out = append(out, i)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// Slot is one usage slot a container holds.
type Slot struct {
	ID       string
	Instance Instance
	// VDev is the Configuration-level virtual device id the kubelet
	// knows the slot by; empty for an Instance-level one.
	VDev string
}

// resolveSlots maps the device ids a container holds (by resource) to
// the slots the Instances record for node: an Instance-level id is the
// slot itself, held as "<node>"; a Configuration-level one is a virtual
// device, held as "C:<vdev>:<node>" on one slot of some Instance.
func resolveSlots(held map[string][]string, instances []Instance, node string) ([]Slot, error) {
	var slots []Slot
	for resource, ids := range held {
		name, _ := strings.CutPrefix(resource, domain+"/")
		il := slices.IndexFunc(instances, func(i Instance) bool { return i.Name == name })
		// A virtual device id is the pool's own: look for its claim in
		// the pool's Instances only.
		pool := slices.DeleteFunc(slices.Clone(instances), func(i Instance) bool { return i.Pool != name })
		for _, id := range ids {
			s, err := resolveSlot(id, il, instances, pool, node)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", resource, id, err)
			}
			slots = append(slots, s)
		}
	}
	sort.Slice(slots, func(a, b int) bool { return slots[a].ID < slots[b].ID })
	return slots, nil
}

func resolveSlot(id string, il int, instances, pool []Instance, node string) (Slot, error) {
	if il >= 0 {
		inst := instances[il]
		if got := inst.Usage[id]; got != node {
			return Slot{}, fmt.Errorf("Instance %s records slot %s as %q, want %q", inst.Name, id, got, node)
		}
		return Slot{ID: id, Instance: inst}, nil
	}
	want := "C:" + id + ":" + node
	for _, inst := range pool {
		for slot, u := range inst.Usage {
			if u == want {
				return Slot{ID: slot, Instance: inst, VDev: id}, nil
			}
		}
	}
	return Slot{}, fmt.Errorf("no Instance records a slot as %q", want)
}

// pluginAllocations runs LIST on the plugin of every drop-in under confDir
// and returns what each ADD returned, by request-id: the bridge's
// request-id is the slot.
func pluginAllocations(ctx context.Context, confDir, pluginDir string) (map[string]spec.AddResult, error) {
	confs, err := invoke.LoadAll(confDir)
	if err != nil {
		return nil, err
	}
	out := map[string]spec.AddResult{}
	for _, c := range confs {
		p, err := invoke.NewPlugin(c, []string{pluginDir})
		if err != nil {
			return nil, err
		}
		list, err := p.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("LIST of %s: %w", c.Path, err)
		}
		for _, a := range list.Allocations {
			out[a.RequestID] = a.Result
		}
	}
	return out, nil
}

// Want is what a container must see: every device node its slots' ADDs
// returned (container path to host path), and every variable they set,
// with each slot's value.
type Want struct {
	Nodes map[string]string
	Env   map[string][]envValue
}

type envValue struct{ value, slot string }

func (v envValue) String() string { return v.value + " (slot " + v.slot + ")" }

// wantFor collects what the slots' ADD results give the container.
func wantFor(slots []Slot, allocs map[string]spec.AddResult) (Want, error) {
	w := Want{Nodes: map[string]string{}, Env: map[string][]envValue{}}
	for _, s := range slots {
		r, ok := allocs[s.ID]
		if !ok {
			return w, fmt.Errorf("the plugin of pool %s lists no allocation for slot %s", s.Instance.Pool, s.ID)
		}
		for _, n := range r.DeviceNodes {
			path := n.ContainerPath
			if path == "" {
				path = n.HostPath
			}
			w.Nodes[path] = n.HostPath
		}
		for k, v := range r.Env {
			w.Env[k] = append(w.Env[k], envValue{v, s.ID})
		}
	}
	return w, nil
}

// Check lists how the report differs from w: a device node missing,
// extra, or not the host's device; a variable a device set that the
// container lacks. Several devices may set one variable: each value must
// be in the container's, where values are joined by commas (the
// plugins' convention for lists).
func (w Want) Check(r report.Report) []string {
	var problems []string
	seen := map[string]bool{}
	for _, d := range r.Devices {
		seen[d.Path] = true
		host, ok := w.Nodes[d.Path]
		if !ok {
			problems = append(problems, fmt.Sprintf("device node %s (%s %d:%d) was not allocated", d.Path, d.Type, d.Major, d.Minor))
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(host, &st); err != nil {
			problems = append(problems, fmt.Sprintf("host device %s: %v", host, err))
		} else if d.Major != unix.Major(st.Rdev) || d.Minor != unix.Minor(st.Rdev) {
			problems = append(problems, fmt.Sprintf("device node %s is %d:%d, the host's %s is %d:%d",
				d.Path, d.Major, d.Minor, host, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
		}
	}
	for path := range w.Nodes {
		if !seen[path] {
			problems = append(problems, fmt.Sprintf("device node %s is missing", path))
		}
	}
	for k, values := range w.Env {
		got, ok := r.Env[k]
		for _, v := range values {
			if !ok || !slices.Contains(strings.Split(got, ","), v.value) {
				problems = append(problems, fmt.Sprintf("slot %s's %s=%s is not in the container's environment (%s=%q, set: %v)", v.slot, k, v.value, k, got, ok))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

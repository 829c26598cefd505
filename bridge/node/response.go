package node

import (
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cdiexec/cdi/spec"
)

// SlotAnnotation is the annotation key recording a slot a container uses,
// "<prefix>/slot-<slot>"; its value is the slot for an Instance-level
// claim and "C:<vdev>:<slot>" for a Configuration-level one, so that
// reclaim can map running containers back to slots.
func SlotAnnotation(prefix, slot string) string { return prefix + "/slot-" + slot }

// cdiDevice is a device as a CDI spec file the bridge wrote holds it: its
// qualified name and the device nodes the runtime gives a container for
// that name.
type cdiDevice struct {
	Name  string
	Nodes []spec.DeviceNode
}

// containerResponse builds one container's part of an Allocate response
// from the ADD results of its slots, one per slot, as the plugin itself
// adds up the devices of one ADD: env and annotations joined
// (spec.JoinValues), each device node, CDI name and mount container path
// once. A device node that a CDI name already gives is not a DeviceSpec
// as well.
type containerResponse struct {
	pluginapi.ContainerAllocateResponse
	nodes map[nodeKey]bool // device nodes given, by CDI name or DeviceSpec
	names map[string]bool  // CDI names given
}

// nodeKey is a device node as the container sees it.
type nodeKey struct{ host, container string }

func newContainerResponse() *containerResponse {
	return &containerResponse{nodes: map[nodeKey]bool{}, names: map[string]bool{}}
}

// add adds slot's ADD result r, of device cdi (nil when the device has no
// CDI name); vdev is the slot's virtual device, "" at Instance level.
func (c *containerResponse) add(r *spec.AddResult, cdi *cdiDevice, prefix, slot, vdev string) {
	if cdi != nil {
		c.addCDI(cdi)
	}
	for _, d := range resultNodes(r) {
		k := nodeKey{d.HostPath, d.ContainerPath}
		if !c.nodes[k] {
			c.nodes[k] = true
			c.Devices = append(c.Devices, &pluginapi.DeviceSpec{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: d.Permissions})
		}
	}
	for _, m := range r.Mounts {
		c.addMount(m)
	}
	c.Envs = spec.JoinValues(c.Envs, r.Env)
	c.Annotations = spec.JoinValues(c.Annotations, r.Annotations)
	value := slot
	if vdev != "" {
		value = "C:" + vdev + ":" + slot
	}
	c.Annotations = spec.JoinValues(c.Annotations, map[string]string{SlotAnnotation(prefix, slot): value})
}

// addCDI gives the container d's CDI name, and with it d's nodes.
func (c *containerResponse) addCDI(d *cdiDevice) {
	if !c.names[d.Name] {
		c.names[d.Name] = true
		c.CdiDevices = append(c.CdiDevices, &pluginapi.CDIDevice{Name: d.Name})
	}
	for _, n := range d.Nodes {
		n = n.WithDefaults()
		c.nodes[nodeKey{n.HostPath, n.ContainerPath}] = true
	}
}

// addMount adds m unless a mount on its container path is there already.
func (c *containerResponse) addMount(m spec.Mount) {
	for _, have := range c.Mounts {
		if have.ContainerPath == m.ContainerPath {
			return
		}
	}
	c.Mounts = append(c.Mounts, &pluginapi.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
}

// resultNodes is r's device nodes with their defaults; a 0.0.x result
// names only host paths.
func resultNodes(r *spec.AddResult) []spec.DeviceNode {
	out := make([]spec.DeviceNode, 0, max(len(r.DeviceNodes), len(r.Devices)))
	for _, d := range r.DeviceNodes {
		out = append(out, d.WithDefaults())
	}
	if len(r.DeviceNodes) == 0 {
		for _, p := range r.Devices {
			out = append(out, spec.DeviceNode{HostPath: p}.WithDefaults())
		}
	}
	return out
}

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

// addToResponse merges one ADD result into a container's response.
func addToResponse(c *pluginapi.ContainerAllocateResponse, r *spec.AddResult, prefix, slot, vdev string) {
	for _, d := range r.DeviceNodes {
		perms := d.Permissions
		if perms == "" {
			perms = "rw"
		}
		path := d.ContainerPath
		if path == "" {
			path = d.HostPath
		}
		c.Devices = append(c.Devices, &pluginapi.DeviceSpec{HostPath: d.HostPath, ContainerPath: path, Permissions: perms})
	}
	if len(r.DeviceNodes) == 0 {
		// A 0.0.x result names only host paths.
		for _, p := range r.Devices {
			c.Devices = append(c.Devices, &pluginapi.DeviceSpec{HostPath: p, ContainerPath: p, Permissions: "rw"})
		}
	}
	for _, m := range r.Mounts {
		c.Mounts = append(c.Mounts, &pluginapi.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	for _, name := range r.CDIDevices {
		c.CdiDevices = append(c.CdiDevices, &pluginapi.CDIDevice{Name: name})
	}
	c.Envs = merge(c.Envs, r.Env)
	c.Annotations = merge(c.Annotations, r.Annotations)
	value := slot
	if vdev != "" {
		value = "C:" + vdev + ":" + slot
	}
	c.Annotations = merge(c.Annotations, map[string]string{SlotAnnotation(prefix, slot): value})
}

func merge(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

package spec

import (
	"time"

	"github.com/tidwall/gjson"

	"github.com/cdiexec/cdi/spec/plainjson"
)

// The plugins write their results, and read back the ADD results they
// store, through plainjson rather than encoding/json, which would cost a
// plugin process more than its own work (see package plainjson). Each
// WriteJSON writes exactly what encoding/json writes for the type's json
// tags; resultjson_test.go holds them to that.

// WriteJSON writes r.
func (r VersionResult) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("cdiVersion")
	w.String(r.CDIVersion)
	w.Key("supportedVersions")
	w.Strings(r.SupportedVersions)
	w.OmitEmptyString("pluginVersion", r.PluginVersion)
	w.EndObject()
}

// WriteJSON writes e.
func (e *Error) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.OmitEmptyString("cdiVersion", e.CDIVersion)
	w.Key("code")
	w.Int(int(e.Code))
	w.Key("msg")
	w.String(e.Msg)
	w.OmitEmptyString("details", e.Details)
	w.EndObject()
}

// WriteJSON writes r.
func (r AddResult) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("cdiVersion")
	w.String(r.CDIVersion)
	w.Key("devices")
	w.Strings(r.Devices)
	w.OmitEmptyInts("numa_locality", r.NUMALocality)
	if len(r.DeviceNodes) > 0 {
		w.Key("deviceNodes")
		writeDeviceNodes(w, r.DeviceNodes)
	}
	w.OmitEmptyStringMap("env", r.Env)
	if len(r.Mounts) > 0 {
		w.Key("mounts")
		w.BeginArray()
		for _, m := range r.Mounts {
			m.WriteJSON(w)
		}
		w.EndArray()
	}
	w.OmitEmptyStringMap("annotations", r.Annotations)
	w.OmitEmptyStrings("cdiDevices", r.CDIDevices)
	if len(r.Units) > 0 {
		w.Key("units")
		w.BeginArray()
		for _, u := range r.Units {
			u.WriteJSON(w)
		}
		w.EndArray()
	}
	w.EndObject()
}

// ReadJSON reads what WriteJSON (or encoding/json) writes for an
// AddResult. Unknown members are skipped.
func (r *AddResult) ReadJSON(v gjson.Result) error {
	return plainjson.Object(v, plainjson.Fields{
		"cdiVersion":    plainjson.String(&r.CDIVersion),
		"devices":       plainjson.Strings(&r.Devices),
		"numa_locality": plainjson.Ints(&r.NUMALocality),
		"deviceNodes":   plainjson.List(&r.DeviceNodes, (*DeviceNode).ReadJSON),
		"env":           plainjson.StringMap(&r.Env),
		"mounts":        plainjson.List(&r.Mounts, (*Mount).ReadJSON),
		"annotations":   plainjson.StringMap(&r.Annotations),
		"cdiDevices":    plainjson.Strings(&r.CDIDevices),
		"units":         plainjson.List(&r.Units, (*Unit).ReadJSON),
	}, false)
}

// WriteJSON writes d.
func (d DeviceNode) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("hostPath")
	w.String(d.HostPath)
	w.OmitEmptyString("containerPath", d.ContainerPath)
	w.OmitEmptyString("permissions", d.Permissions)
	w.EndObject()
}

// ReadJSON reads a DeviceNode.
func (d *DeviceNode) ReadJSON(v gjson.Result) error {
	return plainjson.Object(v, plainjson.Fields{
		"hostPath":      plainjson.String(&d.HostPath),
		"containerPath": plainjson.String(&d.ContainerPath),
		"permissions":   plainjson.String(&d.Permissions),
	}, false)
}

// WriteJSON writes m.
func (m Mount) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("hostPath")
	w.String(m.HostPath)
	w.Key("containerPath")
	w.String(m.ContainerPath)
	if m.ReadOnly {
		w.Key("readOnly")
		w.Bool(true)
	}
	w.EndObject()
}

// ReadJSON reads a Mount.
func (m *Mount) ReadJSON(v gjson.Result) error {
	return plainjson.Object(v, plainjson.Fields{
		"hostPath":      plainjson.String(&m.HostPath),
		"containerPath": plainjson.String(&m.ContainerPath),
		"readOnly":      plainjson.Bool(&m.ReadOnly),
	}, false)
}

// WriteJSON writes u.
func (u Unit) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("resource")
	w.String(u.Resource)
	w.Key("device")
	w.String(u.Device)
	w.Key("slot")
	w.Int(u.Slot)
	w.EndObject()
}

// ReadJSON reads a Unit.
func (u *Unit) ReadJSON(v gjson.Result) error {
	return plainjson.Object(v, plainjson.Fields{
		"resource": plainjson.String(&u.Resource),
		"device":   plainjson.String(&u.Device),
		"slot":     plainjson.Int(&u.Slot),
	}, false)
}

// WriteJSON writes r: the counts beside cdiVersion and the inventory, all
// in key order, as MarshalJSON does.
func (r InfoResult) WriteJSON(w *plainjson.Writer) {
	members := make(map[string]func(), len(r.Counts)+2)
	for k, n := range r.Counts {
		members[k] = func() { w.Int(n) }
	}
	members["cdiVersion"] = func() { w.String(r.CDIVersion) }
	if r.Devices != nil {
		members[InventoryKey] = func() {
			w.BeginArray()
			for _, d := range r.Devices {
				d.WriteJSON(w)
			}
			w.EndArray()
		}
	}
	w.BeginObject()
	for _, k := range plainjson.SortedKeys(members) {
		w.Key(k)
		members[k]()
	}
	w.EndObject()
}

// WriteJSON writes d.
func (d DeviceInfo) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("id")
	w.String(d.ID)
	w.Key("resource")
	w.String(d.Resource)
	w.Key("deviceNodes")
	if d.DeviceNodes == nil {
		w.Null()
	} else {
		writeDeviceNodes(w, d.DeviceNodes)
	}
	if d.NUMANode != nil {
		w.Key("numaNode")
		w.Int(*d.NUMANode)
	}
	w.Key("healthy")
	w.Bool(d.Healthy)
	w.Key("capacity")
	w.Int(d.Capacity)
	w.Key("used")
	w.Int(d.Used)
	w.Key("shared")
	w.Bool(d.Shared)
	w.OmitEmptyStringMap("properties", d.Properties)
	w.EndObject()
}

// ReadJSON reads a DeviceInfo.
func (d *DeviceInfo) ReadJSON(v gjson.Result) error {
	return plainjson.Object(v, plainjson.Fields{
		"id":          plainjson.String(&d.ID),
		"resource":    plainjson.String(&d.Resource),
		"deviceNodes": plainjson.List(&d.DeviceNodes, (*DeviceNode).ReadJSON),
		"numaNode":    plainjson.IntPtr(&d.NUMANode),
		"healthy":     plainjson.Bool(&d.Healthy),
		"capacity":    plainjson.Int(&d.Capacity),
		"used":        plainjson.Int(&d.Used),
		"shared":      plainjson.Bool(&d.Shared),
		"properties":  plainjson.StringMap(&d.Properties),
	}, false)
}

// WriteJSON writes r.
func (r ListResult) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("cdiVersion")
	w.String(r.CDIVersion)
	w.Key("allocations")
	if r.Allocations == nil {
		w.Null()
	} else {
		w.BeginArray()
		for _, a := range r.Allocations {
			a.WriteJSON(w)
		}
		w.EndArray()
	}
	w.EndObject()
}

// WriteJSON writes a.
func (a Allocation) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("requestId")
	w.String(a.RequestID)
	w.Key("request")
	w.String(a.Request)
	w.Key("created")
	WriteTime(w, a.Created)
	w.Key("result")
	a.Result.WriteJSON(w)
	w.EndObject()
}

// WriteJSON writes r.
func (r GCResult) WriteJSON(w *plainjson.Writer) {
	w.BeginObject()
	w.Key("cdiVersion")
	w.String(r.CDIVersion)
	w.Key("released")
	w.Strings(r.Released)
	w.EndObject()
}

// WriteTime writes t as time.Time's MarshalJSON does.
func WriteTime(w *plainjson.Writer, t time.Time) {
	w.String(t.Format(time.RFC3339Nano))
}

func writeDeviceNodes(w *plainjson.Writer, nodes []DeviceNode) {
	w.BeginArray()
	for _, n := range nodes {
		n.WriteJSON(w)
	}
	w.EndArray()
}

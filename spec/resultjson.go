package spec

import "github.com/cdiexec/cdi/spec/plainjson"

// The plugins write their results, and read back the ADD results they
// store, through plainjson rather than encoding/json, which would cost a
// plugin process more than its own work (see package plainjson). Each
// type's AppendMembers is its one description for both: the member names,
// order and omitempty of its json tags. resultjson_test.go holds every
// table to what encoding/json makes of the tags, so that a field added to
// a type without its table learning of it fails there.

// AppendMembers describes r.
func (r *VersionResult) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("cdiVersion", &r.CDIVersion),
		plainjson.Strings("supportedVersions", &r.SupportedVersions),
		plainjson.String("pluginVersion", &r.PluginVersion).OmitEmpty(),
	)
}

// AppendMembers describes e.
func (e *Error) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("cdiVersion", &e.CDIVersion).OmitEmpty(),
		plainjson.Int("code", (*int)(&e.Code)),
		plainjson.String("msg", &e.Msg),
		plainjson.String("details", &e.Details).OmitEmpty(),
	)
}

// AppendMembers describes r.
func (r *AddResult) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("cdiVersion", &r.CDIVersion),
		plainjson.Strings("devices", &r.Devices),
		plainjson.Ints("numa_locality", &r.NUMALocality).OmitEmpty(),
		plainjson.Objects("deviceNodes", &r.DeviceNodes).OmitEmpty(),
		plainjson.StringMap("env", &r.Env).OmitEmpty(),
		plainjson.Objects("mounts", &r.Mounts).OmitEmpty(),
		plainjson.StringMap("annotations", &r.Annotations).OmitEmpty(),
		plainjson.Strings("cdiDevices", &r.CDIDevices).OmitEmpty(),
		plainjson.Objects("units", &r.Units).OmitEmpty(),
	)
}

// AppendMembers describes d.
func (d *DeviceNode) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("hostPath", &d.HostPath),
		plainjson.String("containerPath", &d.ContainerPath).OmitEmpty(),
		plainjson.String("permissions", &d.Permissions).OmitEmpty(),
	)
}

// AppendMembers describes m.
func (m *Mount) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("hostPath", &m.HostPath),
		plainjson.String("containerPath", &m.ContainerPath),
		plainjson.Bool("readOnly", &m.ReadOnly).OmitEmpty(),
	)
}

// AppendMembers describes u.
func (u *Unit) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("resource", &u.Resource),
		plainjson.String("device", &u.Device),
		plainjson.Int("slot", &u.Slot),
	)
}

// AppendMembers describes d.
func (d *DeviceInfo) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("id", &d.ID),
		plainjson.String("resource", &d.Resource),
		plainjson.Objects("deviceNodes", &d.DeviceNodes),
		plainjson.IntPtr("numaNode", &d.NUMANode).OmitEmpty(),
		plainjson.Bool("healthy", &d.Healthy),
		plainjson.Int("capacity", &d.Capacity),
		plainjson.Int("used", &d.Used),
		plainjson.Bool("shared", &d.Shared),
		plainjson.StringMap("properties", &d.Properties).OmitEmpty(),
	)
}

// AppendMembers describes r.
func (r *ListResult) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("cdiVersion", &r.CDIVersion),
		plainjson.Objects("allocations", &r.Allocations),
	)
}

// AppendMembers describes a.
func (a *Allocation) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("requestId", &a.RequestID),
		plainjson.String("request", &a.Request),
		plainjson.Time("created", &a.Created),
		plainjson.Object("result", &a.Result),
	)
}

// AppendMembers describes r.
func (r *GCResult) AppendMembers(ms []plainjson.Member) []plainjson.Member {
	return append(ms,
		plainjson.String("cdiVersion", &r.CDIVersion),
		plainjson.Strings("released", &r.Released),
	)
}

// The documents a plugin prints write themselves (skel's one interface
// for them); all but InfoResult, whose members are its counts, by their
// tables.

// WriteJSON writes r.
func (r VersionResult) WriteJSON(w *plainjson.Writer) { w.Object(&r) }

// WriteJSON writes e.
func (e *Error) WriteJSON(w *plainjson.Writer) { w.Object(e) }

// WriteJSON writes r.
func (r AddResult) WriteJSON(w *plainjson.Writer) { w.Object(&r) }

// WriteJSON writes r.
func (r ListResult) WriteJSON(w *plainjson.Writer) { w.Object(&r) }

// WriteJSON writes r.
func (r GCResult) WriteJSON(w *plainjson.Writer) { w.Object(&r) }

// WriteJSON writes r: the counts beside cdiVersion and the inventory, all
// in key order, as MarshalJSON does.
func (r InfoResult) WriteJSON(w *plainjson.Writer) {
	byName := make(map[string]plainjson.Member, len(r.Counts)+2)
	for k := range r.Counts {
		n := r.Counts[k]
		byName[k] = plainjson.Int(k, &n)
	}
	byName["cdiVersion"] = plainjson.String("cdiVersion", &r.CDIVersion)
	if r.Devices != nil {
		byName[InventoryKey] = plainjson.Objects(InventoryKey, &r.Devices)
	}
	table := make(plainjson.Table, 0, len(byName))
	for _, k := range plainjson.SortedKeys(byName) {
		table = append(table, byName[k])
	}
	w.Object(table)
}

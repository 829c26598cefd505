package conformance

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/cdiexec/cdi/spec"
)

// checkOneDocument: every command prints exactly one JSON object on
// stdout, error or result, and nothing else; only a successful DEL prints
// nothing.
func checkOneDocument(ctx context.Context, s *subject) error {
	runs := []*reply{s.callWith(ctx, nil, "CDI_COMMAND=VERSION")}
	if s.facts.version != "" {
		runs = append(runs, s.oneOfEach(ctx)...)
	}
	var errs []error
	for _, r := range runs {
		err := r.usable()
		switch {
		case err != nil:
		case r.doc == nil && (r.command != "DEL" || r.status != 0):
			err = r.problem("printed nothing, exit status %d; want one JSON document", r.status)
		case r.doc != nil && !isString(r.doc["cdiVersion"]):
			err = r.problem("document without a string cdiVersion: %s", quote(r.stdout))
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// oneOfEach runs each command once, both failing and succeeding where it
// can, without changing any allocation that was there before.
func (s *subject) oneOfEach(ctx context.Context) []*reply {
	runs := []*reply{
		s.call(ctx, "CDI_COMMAND=INFO", s.ver()),
		s.call(ctx, "CDI_COMMAND=MYCMD", s.ver()),
		s.call(ctx),
		s.feed(ctx, []byte("{"), "`{`", "CDI_COMMAND=INFO", s.ver()),
		s.call(ctx, "CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST="+s.facts.unserved()+":1", "CDI_REQUEST_ID="+s.requestID(1)),
		s.del(ctx, s.requestID(2)),
	}
	if rs, _, err := s.facts.pick(1); err == nil {
		id := s.requestID(3)
		add := s.call(ctx, "CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST="+rs+":1", "CDI_REQUEST_ID="+id)
		s.track(id)
		runs = append(runs, add, s.del(ctx, id))
	}
	if s.facts.is010() {
		list := s.call(ctx, "CDI_COMMAND=LIST", s.ver())
		runs = append(runs, list)
		if ids, err := s.listIDs(ctx); err == nil {
			// Every allocation named valid: GC releases nothing.
			runs = append(runs, s.call(ctx, "CDI_COMMAND=GC", s.ver(), "CDI_VALID_REQUEST_IDS="+strings.Join(ids, ",")))
		}
	}
	return runs
}

func isString(raw []byte) bool { return len(raw) > 1 && raw[0] == '"' }

// checkInfoResult: INFO counts the configuration's type and no other
// type, and from 0.1.0 lists every device in a consistent inventory and
// counts any devices it skipped by well-formed reasons.
func checkInfoResult(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	r := s.call(ctx, "CDI_COMMAND=INFO", s.ver())
	var info spec.InfoResult
	if err := wantResult(r, s.facts.version, &info); err != nil {
		return err
	}
	typ := s.dropIn.config.Type
	var errs []error
	if _, ok := info.Counts[typ]; !ok {
		errs = append(errs, r.problem("no count for the configuration's type %q", typ))
	}
	for _, rs := range info.SortedSpecs() {
		if p, err := spec.ParseResourceSpec(rs); err != nil || p.Type != typ || info.Counts[rs] < 0 {
			errs = append(errs, r.problem("count %q: %d is not a count of a resource-spec of type %q", rs, info.Counts[rs], typ))
		}
	}
	if s.facts.is010() {
		if _, ok := r.doc[spec.InventoryKey]; !ok {
			errs = append(errs, r.problem("no %s in a %s result", spec.InventoryKey, s.facts.version))
		}
		errs = append(errs, judgeInventory(r, &info)...)
		errs = append(errs, judgeSkipped(r, &info)...)
	}
	return errors.Join(errs...)
}

// judgeSkipped checks skipped_devices: absent, or at most
// spec.MaxSkipReasons well-formed reasons with positive counts.
func judgeSkipped(r *reply, info *spec.InfoResult) []error {
	raw, ok := r.doc[spec.SkippedKey]
	if !ok {
		return nil
	}
	if len(info.Skipped) == 0 || len(info.Skipped) > spec.MaxSkipReasons {
		return []error{r.problem("%s is %s: want 1 to %d reasons, or no member when no device was skipped", spec.SkippedKey, quote(raw), spec.MaxSkipReasons)}
	}
	var errs []error
	for _, reason := range sortedKeys(info.Skipped) {
		if err := spec.CheckSkipReason(reason); err != nil || info.Skipped[reason] < 1 {
			errs = append(errs, r.problem("%s: %q: %d is not a positive count of a skip-reason", spec.SkippedKey, reason, info.Skipped[reason]))
		}
	}
	return errs
}

// judgeInventory checks each inventory entry, and that each count is the
// capacity of the healthy devices of its resource-spec.
func judgeInventory(r *reply, info *spec.InfoResult) []error {
	var errs []error
	sums := map[string]int{}
	seen := map[string]bool{}
	for _, d := range info.Devices {
		if err := spec.CheckDeviceID(d.ID); err != nil || seen[d.ID] {
			errs = append(errs, r.problem("device id %q is malformed or listed twice", d.ID))
		}
		seen[d.ID] = true
		if _, ok := info.Counts[d.Resource]; !ok {
			errs = append(errs, r.problem("device %q has resource %q, which has no count", d.ID, d.Resource))
		}
		if d.Capacity < 1 || d.Used < 0 {
			errs = append(errs, r.problem("device %q has capacity %d and used %d", d.ID, d.Capacity, d.Used))
		}
		for _, n := range d.DeviceNodes {
			if !filepath.IsAbs(n.HostPath) || strings.Trim(n.Permissions, "rwm") != "" {
				errs = append(errs, r.problem("device %q has node %+v: want an absolute hostPath and permissions of r, w, m", d.ID, n))
			}
		}
		if d.Healthy {
			sums[d.Resource] += d.Capacity
		}
	}
	for rs, n := range info.Counts {
		if sums[rs] != n {
			errs = append(errs, r.problem("count %s is %d, but its healthy devices have %d slots", rs, n, sums[rs]))
		}
	}
	return errs
}

// checkAddResult: ADD's result always has devices; in 0.1.0 one unit per
// requested unit, on a device of the resource-spec, whose inventory nodes
// it returns, named by a valid CDI qualified name; before 0.1.0 none of
// the 0.1.0 members.
func checkAddResult(ctx context.Context, s *subject) error {
	rs, _, err := s.facts.pick(1)
	if err != nil {
		return err
	}
	res, r, err := s.add(ctx, rs+":1", s.requestID(1))
	if err != nil {
		return err
	}
	var errs []error
	if _, ok := r.doc["devices"]; !ok {
		errs = append(errs, r.problem("no devices member: it is required, [] when empty"))
	}
	if s.facts.is010() {
		errs = append(errs, s.judgeAdd010(r, rs, res)...)
	}
	if s.facts.old != "" {
		errs = append(errs, wantNothing(s.del(ctx, s.requestID(1))), s.judgeAddOld(ctx, rs))
	}
	return errors.Join(errs...)
}

func (s *subject) judgeAdd010(r *reply, rs string, res *spec.AddResult) []error {
	if len(res.Units) != 1 || res.Units[0].Resource != rs {
		return []error{r.problem("units %+v: want one unit of %s", res.Units, rs)}
	}
	u := res.Units[0]
	d := s.facts.device(u.Device)
	if d == nil || d.Resource != rs || u.Slot < 0 || u.Slot >= d.Capacity {
		return []error{r.problem("unit %+v is not a slot of a %s device of the inventory", u, rs)}
	}
	var errs []error
	var hostPaths []string
	for _, n := range res.DeviceNodes {
		hostPaths = append(hostPaths, n.HostPath)
	}
	if !slices.Equal(hostPaths, res.Devices) {
		errs = append(errs, r.problem("deviceNodes %v are not the nodes of devices %v", hostPaths, res.Devices))
	}
	for _, n := range d.DeviceNodes {
		if !slices.Contains(res.DeviceNodes, n.WithDefaults()) {
			errs = append(errs, r.problem("device %s: inventory node %+v is not among the result's deviceNodes", d.ID, n.WithDefaults()))
		}
	}
	if len(res.CDIDevices) != 1 {
		return append(errs, r.problem("cdiDevices %v: want one name per allocated device", res.CDIDevices))
	}
	if _, _, name, err := parser.ParseQualifiedName(res.CDIDevices[0]); err != nil || name != d.ID {
		errs = append(errs, r.problem("cdiDevices %q is not a CDI qualified name of device %q (%v)", res.CDIDevices[0], d.ID, err))
	}
	return errs
}

// judgeAddOld checks that a result in an older version has none of the
// 0.1.0 members.
func (s *subject) judgeAddOld(ctx context.Context, rs string) error {
	id := s.requestID(2)
	r := s.call(ctx, "CDI_COMMAND=ADD", "CDI_VERSION="+s.facts.old, "CDI_REQUEST="+rs+":1", "CDI_REQUEST_ID="+id)
	if err := wantResult(r, s.facts.old, nil); err != nil {
		return err
	}
	s.track(id)
	for _, m := range []string{"deviceNodes", "env", "mounts", "annotations", "cdiDevices", "units"} {
		if _, ok := r.doc[m]; ok {
			return r.problem("a %s result has the 0.1.0 member %s", s.facts.old, m)
		}
	}
	return nil
}

// describeUnits formats units for a message.
func describeUnits(units []spec.Unit) string {
	parts := make([]string, len(units))
	for i, u := range units {
		parts[i] = fmt.Sprintf("%s/%d", u.Device, u.Slot)
	}
	return strings.Join(parts, ", ")
}

package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cdiexec/cdi/spec"
)

// facts is what the probe learns before the rules run: the versions, and
// what the plugin offers in the newest version both sides speak.
type facts struct {
	config   *spec.Config
	versions []string // the plugin's supportedVersions; nil when VERSION failed
	version  string   // the newest version in common; "" when none
	old      string   // the newest version in common older than 0.1.0; "" when none
	// noVersion says why version is "": VERSION failed or shares nothing.
	noVersion string
	info      *spec.InfoResult // nil when INFO failed
}

// probe runs VERSION and INFO once; the rules judge those answers
// themselves, so a failure here only makes rules skip.
func probe(ctx context.Context, s *subject) *facts {
	f := &facts{config: s.dropIn.config}
	var v spec.VersionResult
	if !versionReply(s.call(ctx, "CDI_COMMAND=VERSION"), &v) {
		f.noVersion = "VERSION gave no usable answer (see rule version)"
		return f
	}
	f.versions = v.SupportedVersions
	f.version = spec.Newest(spec.SupportedVersions(), f.versions)
	if f.version == "" {
		f.noVersion = "the plugin shares no protocol version with this runner (" + strings.Join(spec.SupportedVersions(), ", ") + ")"
	}
	var olds []string
	for _, v := range f.versions {
		if spec.IsSupported(v) && !spec.AtLeast(v, spec.Version010) {
			olds = append(olds, v)
		}
	}
	f.old = spec.Newest(olds, olds)
	if f.version == "" {
		return f
	}
	var info spec.InfoResult
	if wantResult(s.call(ctx, "CDI_COMMAND=INFO", "CDI_VERSION="+f.version), f.version, &info) == nil {
		f.info = &info
	}
	return f
}

// versionReply decodes a VERSION reply into v; it reports whether r is one.
func versionReply(r *reply, v *spec.VersionResult) bool {
	return r.usable() == nil && r.status == 0 && r.doc != nil && r.errorDoc() == nil &&
		json.Unmarshal(r.stdout, v) == nil && len(v.SupportedVersions) > 0
}

// is010 reports whether the rules speak 0.1.0 or newer with the plugin.
func (f *facts) is010() bool { return spec.AtLeast(f.version, spec.Version010) }

// needVersion skips a rule when the plugin shares no version with this
// runner.
func (f *facts) needVersion() error {
	if f.version == "" {
		return skipf("%s", f.noVersion)
	}
	return nil
}

// needInfo skips a rule that needs to know what the plugin offers.
func (f *facts) needInfo() error {
	if err := f.needVersion(); err != nil {
		return err
	}
	if f.info == nil {
		return skipf("INFO failed (see rule info-result)")
	}
	return nil
}

// need010 skips a rule that needs LIST, GC or the inventory.
func (f *facts) need010() error {
	if err := f.needInfo(); err != nil {
		return err
	}
	if !f.is010() {
		return skipf("needs protocol %s; the plugin speaks %s", spec.Version010, strings.Join(f.versions, ", "))
	}
	return nil
}

// counts is INFO's counts; nil when INFO failed.
func (f *facts) counts() map[string]int {
	if f.info == nil {
		return nil
	}
	return f.info.Counts
}

// devices is INFO's inventory; nil when INFO failed or before 0.1.0.
func (f *facts) devices() []spec.DeviceInfo {
	if f.info == nil {
		return nil
	}
	return f.info.Devices
}

// free returns, per resource-spec, how many units ADD can take now: the
// free slots of healthy devices from the 0.1.0 inventory, else the counts.
func (f *facts) free() map[string]int {
	out := map[string]int{}
	for rs, n := range f.counts() {
		out[rs] = n
	}
	if !f.is010() {
		return out
	}
	for rs := range out {
		out[rs] = 0
	}
	for _, d := range f.devices() {
		if d.Healthy && d.Capacity > d.Used {
			out[d.Resource] += d.Capacity - d.Used
		}
	}
	return out
}

// perRequest is the most units of rs one ADD can take: one slot on each
// of as many devices, so the healthy devices of rs with a free slot in
// 0.1.0; before it, where capacities are unknown, the free units.
func (f *facts) perRequest(rs string) int {
	if !f.is010() {
		return f.free()[rs]
	}
	n := 0
	for _, d := range f.devices() {
		if d.Resource == rs && d.Healthy && d.Capacity > d.Used {
			n++
		}
	}
	return n
}

// pick returns the resource-spec with the most free units, the
// configuration's type first among equals, or a skip when it has fewer
// than min.
func (f *facts) pick(min int) (string, int, error) {
	if err := f.needInfo(); err != nil {
		return "", 0, err
	}
	free := f.free()
	specs := f.specs()
	best := slices.MaxFunc(specs, func(a, b string) int { return free[a] - free[b] })
	if free[f.config.Type] == free[best] {
		best = f.config.Type
	}
	if free[best] < min {
		return "", 0, skipf("needs %d free unit(s) of one resource-spec; the plugin offers %s", min, describeFree(free))
	}
	return best, free[best], nil
}

// specs lists the resource-specs INFO counts, the type first, then sorted.
func (f *facts) specs() []string {
	out := []string{f.config.Type}
	for _, rs := range sortedKeys(f.counts()) {
		if rs != f.config.Type {
			out = append(out, rs)
		}
	}
	return out
}

// served returns a resource-spec the plugin certainly serves, one with a
// positive count, the type first; ok is false when INFO counts none.
func (f *facts) served() (string, bool) {
	for _, rs := range f.specs() {
		if f.counts()[rs] > 0 {
			return rs, true
		}
	}
	return f.config.Type, false
}

// unserved returns a well-formed resource-spec of the type that INFO does
// not count, which the plugin therefore does not serve.
func (f *facts) unserved() string {
	for _, sub := range []string{"conformance", "conformance2", "zz9"} {
		rs := f.config.Type + "-" + sub
		if _, ok := f.counts()[rs]; !ok {
			return rs
		}
	}
	return f.config.Type + "-zz9zz9zz9"
}

// unlistedVersion returns a well-formed version the plugin does not list.
func (f *facts) unlistedVersion() string {
	for _, v := range []string{"0.9.0", "99.0.0", "0.0.0"} {
		if !slices.Contains(f.versions, v) {
			return v
		}
	}
	return "98.7.6"
}

// device returns the inventory entry of id, or nil.
func (f *facts) device(id string) *spec.DeviceInfo {
	devices := f.devices()
	for i := range devices {
		if devices[i].ID == id {
			return &devices[i]
		}
	}
	return nil
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func describeFree(free map[string]int) string {
	if len(free) == 0 {
		return "no resource-spec"
	}
	parts := make([]string, 0, len(free))
	for rs, n := range free {
		parts = append(parts, fmt.Sprintf("%s: %d", rs, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

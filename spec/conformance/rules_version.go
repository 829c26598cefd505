package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	"github.com/cdiexec/cdi/spec"
)

// checkVersion: VERSION needs no other variable, reads no configuration
// and ignores even an unsupported CDI_VERSION; it lists well-formed
// versions oldest first and names the newest as its cdiVersion.
func checkVersion(ctx context.Context, s *subject) error {
	return errors.Join(
		judgeVersion(s.callWith(ctx, nil, "CDI_COMMAND=VERSION")),
		judgeVersion(s.feed(ctx, []byte("not a configuration"), "`not a configuration`", "CDI_COMMAND=version", "CDI_VERSION=0.999")),
	)
}

func judgeVersion(r *reply) error {
	if err := r.usable(); err != nil {
		return err
	}
	var v spec.VersionResult
	if r.status != 0 || r.doc == nil || r.errorDoc() != nil || json.Unmarshal(r.stdout, &v) != nil {
		return r.problem("want a VERSION result and exit status 0, got %s", r.seen())
	}
	list := v.SupportedVersions
	if len(list) == 0 {
		return r.problem("supportedVersions is missing or empty")
	}
	for i, ver := range list {
		if _, err := spec.CompareVersions(ver, ver); err != nil {
			return r.problem("supportedVersions holds %q, not MAJOR.MINOR.PATCH", ver)
		}
		if i == 0 {
			continue
		}
		if c, _ := spec.CompareVersions(list[i-1], ver); c >= 0 {
			return r.problem("supportedVersions %v is not oldest first without repeats", list)
		}
	}
	if v.CDIVersion != list[len(list)-1] {
		return r.problem("cdiVersion %q is not the newest supported version %q", v.CDIVersion, list[len(list)-1])
	}
	if spec.Newest(spec.SupportedVersions(), list) == "" {
		return r.problem("supportedVersions %v shares no version with this runner (%s)", list, strings.Join(spec.SupportedVersions(), ", "))
	}
	return nil
}

// checkNegotiation: a result is written in the call's version, with the
// 0.1.0 inventory exactly from 0.1.0 on and the 0.2.0 skipped_devices
// never before 0.2.0 (a caller of an older version may fail on it); INFO
// without CDI_VERSION answers in the configuration's version.
func checkNegotiation(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	var errs []error
	for _, v := range s.facts.versions {
		if !spec.IsSupported(v) {
			continue
		}
		r := s.call(ctx, "CDI_COMMAND=INFO", "CDI_VERSION="+v)
		err := wantResult(r, v, nil)
		if _, has := r.doc[spec.InventoryKey]; err == nil && has != spec.AtLeast(v, spec.Version010) {
			err = r.problem("%s present: %v; want it in results of %s and newer only", spec.InventoryKey, has, spec.Version010)
		}
		if _, has := r.doc[spec.SkippedKey]; err == nil && has && !spec.AtLeast(v, spec.Version020) {
			err = r.problem("%s in a %s result; it exists from %s", spec.SkippedKey, v, spec.Version020)
		}
		errs = append(errs, err)
	}
	errs = append(errs, wantResult(s.call(ctx, "CDI_COMMAND=INFO"), s.dropIn.config.CDIVersion, nil))
	return errors.Join(errs...)
}

// checkCommandCase: CDI_COMMAND is matched without regard to ASCII case,
// and only ASCII case.
func checkCommandCase(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	var errs []error
	for _, cmd := range []string{"info", "Info", "iNFO"} {
		errs = append(errs, wantResult(s.call(ctx, "CDI_COMMAND="+cmd, s.ver()), s.facts.version, nil))
	}
	errs = append(errs, wantError(s.call(ctx, "CDI_COMMAND=ınfo", s.ver()), spec.CodeUnsupportedCommand))
	return errors.Join(errs...)
}

// checkUnknownVariables: variables the plugin does not know change nothing.
func checkUnknownVariables(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	plain := s.call(ctx, "CDI_COMMAND=INFO", s.ver())
	extra := s.call(ctx, "CDI_COMMAND=INFO", s.ver(), "CDI_FUTURE_VARIABLE=1", "CNI_ARGS=IgnoreUnknown=1", "LANG=C.UTF-8")
	if err := errors.Join(wantResult(plain, s.facts.version, nil), wantResult(extra, s.facts.version, nil)); err != nil {
		return err
	}
	var a, b any
	_ = json.Unmarshal(plain.stdout, &a) // both decoded once already
	_ = json.Unmarshal(extra.stdout, &b)
	if !reflect.DeepEqual(a, b) {
		return extra.problem("answered %s, without the unknown variables %s", quote(extra.stdout), quote(plain.stdout))
	}
	return nil
}

// checkOrder: when a call has several faults, the plugin reports the one
// the earliest step of the order of checks finds.
func checkOrder(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	junk, junkNote := []byte("{not json"), "`{not json`"
	bad := s.facts.unlistedVersion()
	malformedAdd := []string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=" + s.dropIn.config.Type + ":0", "CDI_REQUEST_ID=-x"}
	cases := []errorCase{
		{vars: []string{"CDI_VERSION=0.999", "CDI_COMMAND=MYCMD"}, code: spec.CodeIncompatibleVersion},
		{[]string{"CDI_VERSION=0.999", "CDI_COMMAND=INFO"}, spec.CodeIncompatibleVersion, junk, junkNote},
		{[]string{"CDI_VERSION=" + s.facts.version}, spec.CodeMissingParameter, junk, junkNote},
		{[]string{"CDI_COMMAND=MYCMD"}, spec.CodeUnsupportedCommand, junk, junkNote},
		{[]string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST_ID=x"}, spec.CodeMissingParameter, junk, junkNote},
		{malformedAdd, spec.CodeInvalidConfig, junk, junkNote},
		{malformedAdd, spec.CodeIncompatibleConfigVersion, s.confWith(map[string]any{"cdiVersion": bad}), "drop-in of cdiVersion " + bad},
	}
	if s.facts.old != "" {
		cases = append(cases, errorCase{vars: []string{"CDI_COMMAND=GC", "CDI_VERSION=" + s.facts.old, "CDI_VALID_REQUEST_IDS=-x"}, code: spec.CodeUnsupportedCommand})
	}
	return s.wantErrors(ctx, cases)
}

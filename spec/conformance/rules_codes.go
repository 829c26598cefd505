package conformance

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/cdiexec/cdi/spec"
)

// wantErrorIn is wantError that also checks the error document's cdiVersion.
func wantErrorIn(r *reply, code spec.Code, version string) error {
	if err := wantError(r, code); err != nil {
		return err
	}
	if got := r.errorDoc().CDIVersion; got != version {
		return r.problem("error document in cdiVersion %q, want %q", got, version)
	}
	return nil
}

// errorVersion is the version SPEC.md gives an error document of a call
// without a supported CDI_VERSION: the configuration's, if the plugin
// supports it, else the newest the plugin supports.
func (f *facts) errorVersion(confVersion string) string {
	if slices.Contains(f.versions, confVersion) {
		return confVersion
	}
	return f.newest()
}

// newest is the newest version the plugin lists.
func (f *facts) newest() string { return spec.Newest(f.versions, f.versions) }

// checkCode1: an unsupported CDI_VERSION is code 1 before anything else,
// even without CDI_COMMAND (the draft's first error example), and the
// document falls back on the configuration's version.
func checkCode1(ctx context.Context, s *subject) error {
	if s.facts.versions == nil {
		return s.facts.needVersion()
	}
	want := s.facts.errorVersion(s.dropIn.config.CDIVersion)
	return errors.Join(
		wantErrorIn(s.call(ctx, "CDI_VERSION=0.999"), spec.CodeIncompatibleVersion, want),
		wantErrorIn(s.call(ctx, "CDI_COMMAND=INFO", "CDI_VERSION="+s.facts.unlistedVersion()), spec.CodeIncompatibleVersion, want),
	)
}

// checkCode2: a configuration in a version the plugin does not support
// is code 2, written in CDI_VERSION, or without it in the newest version.
func checkCode2(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	bad := s.facts.unlistedVersion()
	conf, note := s.confWith(map[string]any{"cdiVersion": bad}), "drop-in of cdiVersion "+bad
	return errors.Join(
		wantErrorIn(s.feed(ctx, conf, note, "CDI_COMMAND=INFO", s.ver()), spec.CodeIncompatibleConfigVersion, s.facts.version),
		wantErrorIn(s.feed(ctx, conf, note, "CDI_COMMAND=INFO"), spec.CodeIncompatibleConfigVersion, s.facts.newest()),
	)
}

// checkCode3: an unknown command is code 3, and so are LIST and GC under
// a version older than 0.1.0.
func checkCode3(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	cases := []errorCase{{vars: []string{"CDI_COMMAND=MYCMD", s.ver()}, code: spec.CodeUnsupportedCommand}}
	if s.facts.old != "" {
		old := "CDI_VERSION=" + s.facts.old
		cases = append(cases,
			errorCase{vars: []string{"CDI_COMMAND=LIST", old}, code: spec.CodeUnsupportedCommand},
			errorCase{vars: []string{"CDI_COMMAND=GC", old, "CDI_VALID_REQUEST_IDS="}, code: spec.CodeUnsupportedCommand})
	}
	return s.wantErrors(ctx, cases)
}

// checkCode4: a resource-spec the configuration does not serve is code 4,
// also beside a served one, and also when its amount is malformed: the
// draft's third ADD example, gpu:1,gpu-memory:2048Mi.
func checkCode4(ctx context.Context, s *subject) error {
	if err := s.facts.needInfo(); err != nil {
		return err
	}
	typ, unserved := s.dropIn.config.Type, s.facts.unserved()
	add := func(request string) []string {
		return []string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=" + request, "CDI_REQUEST_ID=" + s.requestID(1)}
	}
	return s.wantErrors(ctx, []errorCase{
		{vars: add(unserved + ":1"), code: spec.CodeUnsupportedResource},
		{vars: add(typ + ":1," + unserved + ":1"), code: spec.CodeUnsupportedResource},
		{vars: add(typ + ":1," + unserved + ":2048Mi"), code: spec.CodeUnsupportedResource},
	})
}

// checkCode5: DEL of a request-id that holds nothing is code 5, exit 0.
func checkCode5(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	return wantError(s.call(ctx, "CDI_COMMAND=DEL", s.ver(), "CDI_REQUEST_ID="+s.requestID(1)), spec.CodeUnknownRequestID)
}

// checkCode6: a required variable that is unset, or set empty, is code 6.
func checkCode6(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	id := "CDI_REQUEST_ID=" + s.requestID(1)
	cases := []errorCase{
		{vars: nil, code: spec.CodeMissingParameter},
		{vars: []string{"CDI_COMMAND=ADD"}, code: spec.CodeMissingParameter},
		{vars: []string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=", id}, code: spec.CodeMissingParameter},
		{vars: []string{"CDI_COMMAND=DEL", s.ver()}, code: spec.CodeMissingParameter},
		{vars: []string{"CDI_COMMAND=DEL", id}, code: spec.CodeMissingParameter},
	}
	if s.facts.is010() {
		cases = append(cases,
			errorCase{vars: []string{"CDI_COMMAND=LIST"}, code: spec.CodeMissingParameter},
			errorCase{vars: []string{"CDI_COMMAND=GC", s.ver()}, code: spec.CodeMissingParameter})
	}
	return s.wantErrors(ctx, cases)
}

// checkCode7: a value that does not match its grammar is code 7, for
// every variable a command takes.
func checkCode7(ctx context.Context, s *subject) error {
	if err := s.facts.needInfo(); err != nil {
		return err
	}
	served, ok := s.facts.served()
	if !ok {
		return skipf("INFO counts no unit of any resource-spec, so no request is certain to name a served one")
	}
	add := func(request, id string, more ...string) []string {
		return append([]string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=" + request, "CDI_REQUEST_ID=" + id}, more...)
	}
	id := s.requestID(1)
	cases := []errorCase{
		{vars: add(served+":0", id), code: spec.CodeInvalidParameter},
		{vars: add(served+":2048Mi", id), code: spec.CodeInvalidParameter},
		{vars: add(served+":1,"+served+":1", id), code: spec.CodeInvalidParameter},
		{vars: add(served+":1", "-x"), code: spec.CodeInvalidParameter},
		{vars: add(served+":1", strings.Repeat("a", 65)), code: spec.CodeInvalidParameter},
		{vars: add(served+":1", id, "CDI_REQUEST_NUMA_LOCALITY=a"), code: spec.CodeInvalidParameter},
		{vars: add(served+":1", id, "CDI_REQUEST_NUMA_LOCALITY=10000"), code: spec.CodeInvalidParameter},
		{vars: []string{"CDI_COMMAND=DEL", s.ver(), "CDI_REQUEST_ID=-x"}, code: spec.CodeInvalidParameter},
	}
	if s.facts.is010() {
		cases = append(cases,
			errorCase{vars: add(served+":1", id, "CDI_REQUEST_DEVICES=a,a"), code: spec.CodeInvalidParameter},
			errorCase{vars: []string{"CDI_COMMAND=GC", s.ver(), "CDI_VALID_REQUEST_IDS=-x"}, code: spec.CodeInvalidParameter},
			errorCase{vars: []string{"CDI_COMMAND=GC", s.ver(), "CDI_VALID_REQUEST_IDS=a,,b"}, code: spec.CodeInvalidParameter})
	}
	if s.facts.old != "" {
		old := []string{"CDI_COMMAND=ADD", "CDI_VERSION=" + s.facts.old, "CDI_REQUEST=" + served + ":1", "CDI_REQUEST_ID=" + id, "CDI_REQUEST_DEVICES=x"}
		cases = append(cases, errorCase{vars: old, code: spec.CodeInvalidParameter})
	}
	return s.wantErrors(ctx, cases)
}

// checkCode8: stdin that is not a valid configuration is code 8.
func checkCode8(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	info := []string{"CDI_COMMAND=INFO", s.ver()}
	oversized := append(append([]byte{}, s.conf...), bytes.Repeat([]byte(" "), spec.MaxConfigSize)...)
	typ, plugin := s.dropIn.config.Type, s.dropIn.config.Plugin
	stdins := []struct {
		note  string
		stdin []byte
	}{
		{"truncated JSON", []byte(`{"cdiVersion":"` + s.facts.version + `","name":"x"`)},
		{"nothing", []byte{}},
		{"`[]`", []byte("[]")},
		{"drop-in without name", s.confWith(map[string]any{"name": nil})},
		{`drop-in with plugin ""`, s.confWith(map[string]any{"plugin": ""})},
		{"drop-in with plugin ../" + plugin, s.confWith(map[string]any{"plugin": "../" + plugin})},
		{"drop-in with type 1" + typ, s.confWith(map[string]any{"type": "1" + typ})},
		{"drop-in with args 5", s.confWith(map[string]any{"args": 5})},
		{"drop-in followed by `{}`", append(append([]byte{}, s.conf...), "{}"...)},
		{"drop-in padded past 1 MiB", oversized},
	}
	var cases []errorCase
	for _, in := range stdins {
		cases = append(cases, errorCase{info, spec.CodeInvalidConfig, in.stdin, in.note})
	}
	return s.wantErrors(ctx, cases)
}

// checkCode9: a configuration of a type the plugin does not serve is
// code 9. A plugin that serves any type is skipped.
func checkCode9(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	other := "cdiconformance"
	if other == s.dropIn.config.Type {
		other += "2"
	}
	r := s.feed(ctx, s.confWith(map[string]any{"type": other}), "drop-in of type "+other, "CDI_COMMAND=INFO", s.ver())
	if r.usable() == nil && r.status == 0 && r.errorDoc() == nil {
		return skipf("the plugin serves any resource-type: INFO of type %q succeeded", other)
	}
	return wantError(r, spec.CodeTypeMismatch)
}

// unknownArg is an args member no plugin knows.
const unknownArg = "cdiconformance_no_such_arg"

// checkCode15: an args member the plugin does not know is code 15, whose
// details name it, for every command but VERSION, and before the
// command's version and parameters are checked.
func checkCode15(ctx context.Context, s *subject) error {
	if err := s.facts.needVersion(); err != nil {
		return err
	}
	conf, note := s.confWithArgs(map[string]any{unknownArg: true}), "drop-in with args."+unknownArg
	malformedAdd := []string{"CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST=" + s.dropIn.config.Type + ":0", "CDI_REQUEST_ID=-x"}
	calls := [][]string{
		{"CDI_COMMAND=INFO", s.ver()},
		{"CDI_COMMAND=INFO"},
		{"CDI_COMMAND=DEL", s.ver(), "CDI_REQUEST_ID=" + s.requestID(1)},
		malformedAdd,
	}
	if s.facts.is010() {
		calls = append(calls, []string{"CDI_COMMAND=LIST", s.ver()})
	}
	if s.facts.old != "" {
		calls = append(calls, []string{"CDI_COMMAND=LIST", "CDI_VERSION=" + s.facts.old})
	}
	var errs []error
	for _, vars := range calls {
		r := s.feed(ctx, conf, note, vars...)
		err := wantError(r, spec.CodeUnknownArg)
		if e := r.errorDoc(); err == nil && !strings.Contains(e.Details, unknownArg) {
			err = r.problem("details %q do not name the unknown member %s", e.Details, unknownArg)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkCode12: CDI_REQUEST_DEVICES naming a device the plugin does not
// have is code 12.
func checkCode12(ctx context.Context, s *subject) error {
	if err := s.facts.need010(); err != nil {
		return err
	}
	served, ok := s.facts.served()
	if !ok {
		return skipf("INFO counts no unit of any resource-spec, so no request is certain to name a served one")
	}
	r := s.call(ctx, "CDI_COMMAND=ADD", s.ver(), "CDI_REQUEST="+served+":1", "CDI_REQUEST_ID="+s.requestID(1),
		"CDI_REQUEST_DEVICES=cdiconformance-no-such-device")
	return wantError(r, spec.CodeUnknownDevice)
}

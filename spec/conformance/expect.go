package conformance

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cdiexec/cdi/spec"
)

// errSkip is wrapped by a rule's error when the rule does not apply to
// the plugin; the rest of the message says why.
var errSkip = errors.New("skipped")

func skipf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errSkip, fmt.Sprintf(format, args...))
}

// problem formats a failure of the run r: what was sent, then what is wrong.
func (r *reply) problem(format string, args ...any) error {
	return fmt.Errorf("%s: %s", r.label, fmt.Sprintf(format, args...))
}

// seen describes r's outcome for a failure message.
func (r *reply) seen() string {
	if len(r.stdout) == 0 {
		return fmt.Sprintf("exit status %d, nothing on stdout", r.status)
	}
	return fmt.Sprintf("exit status %d, stdout %s", r.status, quote(r.stdout))
}

// usable fails when r has no document to judge: the plugin did not run,
// or stdout is not one JSON object.
func (r *reply) usable() error {
	if r.runErr != nil {
		return r.problem("%v", r.runErr)
	}
	if r.docErr != nil {
		return r.problem("%v", r.docErr)
	}
	return nil
}

// errorDoc returns r's error document, or nil when stdout holds none: an
// object with a non-zero integer code and a string msg.
func (r *reply) errorDoc() *spec.Error {
	var probe struct {
		CDIVersion string     `json:"cdiVersion"`
		Code       *spec.Code `json:"code"`
		Msg        *string    `json:"msg"`
		Details    string     `json:"details"`
	}
	if r.doc == nil || json.Unmarshal(mustJSON(r.doc), &probe) != nil || probe.Code == nil || probe.Msg == nil || *probe.Code == 0 {
		return nil
	}
	return &spec.Error{CDIVersion: probe.CDIVersion, Code: *probe.Code, Msg: *probe.Msg, Details: probe.Details}
}

// wantError checks that r is an error document with code, the code's
// message, a cdiVersion, and the exit status of an error: 1, or 0 for DEL.
func wantError(r *reply, code spec.Code) error {
	if err := r.usable(); err != nil {
		return err
	}
	e := r.errorDoc()
	switch {
	case e == nil:
		return r.problem("want error code %d, got %s", code, r.seen())
	case e.Code != code:
		return r.problem("want error code %d, got code %d (%s)", code, e.Code, e.Details)
	case e.Msg != code.Message():
		return r.problem("code %d has msg %q, want %q", code, e.Msg, code.Message())
	case e.CDIVersion == "":
		return r.problem("error document without a cdiVersion: %s", quote(r.stdout))
	}
	want := 1
	if r.command == "DEL" {
		want = 0
	}
	if r.status != want {
		return r.problem("error code %d with exit status %d, want %d", code, r.status, want)
	}
	return nil
}

// wantResult checks that r succeeded with a result document written in
// version, and decodes it into v unless v is nil.
func wantResult(r *reply, version string, v any) error {
	if err := r.usable(); err != nil {
		return err
	}
	if e := r.errorDoc(); e != nil {
		return r.problem("want success, got error code %d (%s: %s), exit status %d", e.Code, e.Msg, e.Details, r.status)
	}
	if r.doc == nil || r.status != 0 {
		return r.problem("want a result document and exit status 0, got %s", r.seen())
	}
	var head struct {
		CDIVersion string `json:"cdiVersion"`
	}
	if err := json.Unmarshal(mustJSON(r.doc), &head); err != nil || head.CDIVersion != version {
		return r.problem("result in cdiVersion %q, want %q", head.CDIVersion, version)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(r.stdout, v); err != nil {
		return r.problem("result does not decode: %v", err)
	}
	return nil
}

// wantNothing checks a successful DEL: exit status 0 and empty stdout.
func wantNothing(r *reply) error {
	if err := r.usable(); err != nil {
		return err
	}
	if r.doc != nil || r.status != 0 {
		return r.problem("want success with nothing on stdout, got %s", r.seen())
	}
	return nil
}

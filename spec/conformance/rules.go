package conformance

import (
	"context"
	"errors"

	"github.com/cdiexec/cdi/spec"
)

// Rules returns every rule Run checks, in the order it checks them.
func Rules() []Rule {
	return []Rule{
		{"version", "§2 Commands; §5 VERSION result", checkVersion},
		{"version-negotiation", "§2 Version of the output", checkNegotiation},
		{"command-case", "§2 Parameters", checkCommandCase},
		{"unknown-variables", "§2 Parameters", checkUnknownVariables},
		{"order-of-checks", "§2 Order of checks", checkOrder},
		{"code-1-cdi-version", "§3 Codes; §2 Order of checks, step 2", checkCode1},
		{"code-2-config-version", "§3 Codes; §1 Fields", checkCode2},
		{"code-3-command", "§3 Codes; §2 Commands", checkCode3},
		{"code-4-resource-spec", "§3 Codes; §2 Order of checks, step 11", checkCode4},
		{"code-5-request-id", "§3 Codes; §4 DEL", checkCode5},
		{"code-6-missing", "§3 Codes; §2 Parameters", checkCode6},
		{"code-7-malformed", "§3 Codes; §6 Grammar", checkCode7},
		{"code-8-config", "§3 Codes; §1 Fields", checkCode8},
		{"code-9-type", "§3 Codes; §1 Fields", checkCode9},
		{"code-12-device", "§3 Codes; §4 ADD, step 3", checkCode12},
		{"code-15-args", "§3 Codes; §1 Fields; §2 Order of checks, step 9", checkCode15},
		{"stdout-one-document", "§2 Overview; §3 Error document", checkOneDocument},
		{"info-result", "§4 INFO; §5 INFO result", checkInfoResult},
		{"add-result", "§4 ADD; §5 ADD result", checkAddResult},
		{"add-idempotent", "§4 ADD, step 2", checkIdempotent},
		{"add-conflict", "§4 ADD, step 2; §3 code 11", checkConflict},
		{"add-all-or-nothing", "§4 ADD; §3 code 10", checkAllOrNothing},
		{"del-never-fails", "§4 DEL; §3 Error document", checkDel},
		{"list", "§4 LIST; §5 LIST result", checkList},
		{"gc", "§4 GC; §5 GC result", checkGC},
		{"concurrent-add", "§4 Concurrency and state", checkConcurrentAdd},
		{"concurrent-add-pinned", "§4 Concurrency and state", checkConcurrentPinned},
	}
}

// ver is the CDI_VERSION variable of the version the rules speak.
func (s *subject) ver() string { return "CDI_VERSION=" + s.facts.version }

// errorCase is one call that must fail with code.
type errorCase struct {
	vars  []string
	code  spec.Code
	stdin []byte // nil: the rule's drop-in
	note  string // what stdin is, when it is not the drop-in
}

// wantErrors runs every case and joins the failures.
func (s *subject) wantErrors(ctx context.Context, cases []errorCase) error {
	var errs []error
	for _, c := range cases {
		r := s.call(ctx, c.vars...)
		if c.stdin != nil {
			r = s.feed(ctx, c.stdin, c.note, c.vars...)
		}
		errs = append(errs, wantError(r, c.code))
	}
	return errors.Join(errs...)
}

// confWith is the rule's drop-in with top-level members changed (nil
// removes one).
func (s *subject) confWith(changes map[string]any) []byte {
	return s.dropIn.bytes(s.stateDir, changes)
}

// confWithArgs is the rule's drop-in with members added to its args, which
// it gets if it has none.
func (s *subject) confWithArgs(extra map[string]any) []byte {
	return s.dropIn.withArgs(s.stateDir, extra)
}

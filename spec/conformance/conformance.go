package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cdiexec/cdi/spec/invoke"
)

// Status is a rule's verdict.
type Status int

// The verdicts. Skip means the rule does not apply to this plugin (it
// lacks protocol 0.1.0, free devices, ...), never that it broke one.
const (
	Pass Status = iota
	Fail
	Skip
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "PASS"
	case Fail:
		return "FAIL"
	}
	return "SKIP"
}

// Rule is one rule of SPEC.md that a caller can check from outside.
type Rule struct {
	// Name is short and stable, e.g. "add-idempotent".
	Name string
	// Section is where SPEC.md states the rule, e.g. "§4 ADD".
	Section string
	check   func(context.Context, *subject) error
}

// Result is one rule's outcome.
type Result struct {
	Rule    string
	Section string
	Status  Status
	// Detail is what was seen when the rule failed, or why it was skipped:
	// one line per problem.
	Detail string
}

// Options says what to check.
type Options struct {
	// Plugin is the path of the plugin binary.
	Plugin string
	// DropIn is a configuration the plugin should accept.
	DropIn []byte
	// Timeout bounds each run of the plugin; 0 means invoke.DefaultTimeout.
	Timeout time.Duration
}

// Report is the outcome of Run.
type Report struct {
	Plugin string
	// Type and Version are the drop-in's type and the protocol version the
	// rules spoke; NoVersion says why Version is "", when it is.
	Type, Version, NoVersion string
	// ScratchState says whether the rules ran in scratch state
	// directories (the drop-in has args.stateDir) or in the plugin's own state.
	ScratchState bool
	Results      []Result
}

// Failed reports whether any rule failed.
func (r *Report) Failed() bool {
	for _, res := range r.Results {
		if res.Status == Fail {
			return true
		}
	}
	return false
}

// Run checks the plugin against every rule of Rules, in order. Its error
// is for a run that could not start: a drop-in that is not a valid
// configuration (wrapping ErrDropIn) or no room for the scratch state.
// Everything the plugin does wrong is in the Report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	d, err := parseDropIn(opts.DropIn)
	if err != nil {
		return nil, err
	}
	scratch, err := os.MkdirTemp("", "cdi-conformance-")
	if err != nil {
		return nil, fmt.Errorf("scratch state directory: %w", err)
	}
	defer os.RemoveAll(scratch)
	t := &target{opts: opts, dropIn: d, scratch: scratch, token: newToken()}
	if t.opts.Timeout <= 0 {
		t.opts.Timeout = invoke.DefaultTimeout
	}
	probeSubject, err := t.subject("probe", nil)
	if err != nil {
		return nil, err
	}
	f := probe(ctx, probeSubject)
	rep := &Report{Plugin: opts.Plugin, Type: d.config.Type, Version: f.version, NoVersion: f.noVersion, ScratchState: d.hasStateDir()}
	for _, rule := range Rules() {
		rep.Results = append(rep.Results, t.check(ctx, rule, f))
	}
	return rep, nil
}

// target is one Run's plugin and scratch space.
type target struct {
	opts    Options
	dropIn  *dropIn
	scratch string
	token   string
}

// check runs one rule in a subject of its own.
func (t *target) check(ctx context.Context, rule Rule, f *facts) Result {
	res := Result{Rule: rule.Name, Section: rule.Section}
	s, err := t.subject(rule.Name, f)
	if err == nil {
		err = rule.check(ctx, s)
		s.cleanup(ctx)
	}
	switch {
	case err == nil:
		res.Status = Pass
	case errors.Is(err, errSkip):
		res.Status, res.Detail = Skip, skipReason(err)
	default:
		res.Status, res.Detail = Fail, err.Error()
	}
	return res
}

// subject gives a rule its drop-in: with a state directory of its own
// when the drop-in names one.
func (t *target) subject(rule string, f *facts) (*subject, error) {
	s := &subject{rule: rule, plugin: t.opts.Plugin, dropIn: t.dropIn, timeout: t.opts.Timeout, token: t.token, facts: f}
	if t.dropIn.hasStateDir() {
		s.stateDir = filepath.Join(t.scratch, rule)
		if err := os.Mkdir(s.stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("scratch state directory: %w", err)
		}
	}
	s.conf = t.dropIn.bytes(s.stateDir, nil)
	return s, nil
}

// skipReason is a skip's message without the errSkip prefix.
func skipReason(err error) string {
	msg := err.Error()
	if prefix := errSkip.Error() + ": "; len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}

// newToken returns a short random prefix for this run's request-ids, so
// that they cannot be taken for anyone else's in a shared state.
func newToken() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return "cc" + hex.EncodeToString(b)
}

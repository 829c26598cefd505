package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/cdiexec/cdi/spec"
)

// ErrDropIn is wrapped by Run's error for a drop-in that is not a valid
// configuration: the rules need one the plugin should accept.
var ErrDropIn = errors.New("invalid drop-in")

// dropIn is the drop-in under test, kept as JSON members so that rules can
// change one and leave the others as the operator wrote them.
type dropIn struct {
	config  *spec.Config
	members map[string]json.RawMessage
	args    map[string]json.RawMessage // nil when the drop-in has no args object
}

func parseDropIn(data []byte) (*dropIn, error) {
	cfg, err := spec.ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDropIn, err)
	}
	d := &dropIn{config: cfg}
	if err := json.Unmarshal(data, &d.members); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDropIn, err)
	}
	if raw, ok := d.members["args"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &d.args); err != nil || d.args == nil {
			return nil, fmt.Errorf("%w: args is not an object", ErrDropIn)
		}
	}
	return d, nil
}

// hasStateDir reports whether the drop-in sets args.stateDir, which the
// rules then replace with scratch directories.
func (d *dropIn) hasStateDir() bool {
	_, ok := d.args["stateDir"]
	return ok
}

// bytes writes the drop-in with args.stateDir set to stateDir (unless that
// is "") and the top-level members in changes set, or removed where the
// value is nil.
func (d *dropIn) bytes(stateDir string, changes map[string]any) []byte {
	members := maps.Clone(d.members)
	if stateDir != "" && d.args != nil {
		args := maps.Clone(d.args)
		args["stateDir"] = mustJSON(stateDir)
		members["args"] = mustJSON(args)
	}
	for k, v := range changes {
		if v == nil {
			delete(members, k)
			continue
		}
		members[k] = mustJSON(v)
	}
	return mustJSON(members)
}

// withArgs is bytes with the members of extra added to args, which the
// drop-in gets if it has none.
func (d *dropIn) withArgs(stateDir string, extra map[string]any) []byte {
	args := maps.Clone(d.args)
	if args == nil {
		args = map[string]json.RawMessage{}
	}
	if stateDir != "" && d.args != nil {
		args["stateDir"] = mustJSON(stateDir)
	}
	for k, v := range extra {
		args[k] = mustJSON(v)
	}
	return d.bytes("", map[string]any{"args": args})
}

// mustJSON marshals values that cannot fail to marshal: strings, numbers
// and maps of raw JSON.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("conformance: marshalling %T: %v", v, err))
	}
	return b
}

package skel

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cdiexec/cdi/spec"
)

// commandSpec is one row of the command table: which variables a command
// needs, from which protocol version it exists, and how it runs.
type commandSpec struct {
	required   []string
	minVersion string
	// implemented reports whether the plugin has a callback for it.
	implemented func(*Plugin) bool
	run         func(*Plugin, *Args) (jsonDocument, error)
}

// commandTable returns the commands skel knows. VERSION is answered before
// the table is consulted and needs nothing.
func commandTable() map[string]commandSpec {
	return map[string]commandSpec{
		spec.CmdInfo: {
			implemented: func(p *Plugin) bool { return p.Info != nil },
			run: func(p *Plugin, a *Args) (jsonDocument, error) {
				r, err := p.Info(a)
				return versioned(r, err, func(r *spec.InfoResult) jsonDocument { return r.ForVersion(a.Version) })
			},
		},
		spec.CmdAdd: {
			required:    []string{spec.EnvVersion, spec.EnvRequest, spec.EnvRequestID},
			implemented: func(p *Plugin) bool { return p.Add != nil },
			run: func(p *Plugin, a *Args) (jsonDocument, error) {
				r, err := p.Add(a)
				return versioned(r, err, func(r *spec.AddResult) jsonDocument { return r.ForVersion(a.Version) })
			},
		},
		spec.CmdDel: {
			required:    []string{spec.EnvVersion, spec.EnvRequestID},
			implemented: func(p *Plugin) bool { return p.Del != nil },
			run:         func(p *Plugin, a *Args) (jsonDocument, error) { return nil, p.Del(a) },
		},
		spec.CmdList: {
			required:    []string{spec.EnvVersion},
			minVersion:  spec.Version010,
			implemented: func(p *Plugin) bool { return p.List != nil },
			run: func(p *Plugin, a *Args) (jsonDocument, error) {
				r, err := p.List(a)
				return versioned(r, err, func(r *spec.ListResult) jsonDocument {
					out := *r
					out.CDIVersion = a.Version
					if out.Allocations == nil {
						out.Allocations = []spec.Allocation{}
					}
					return out
				})
			},
		},
		spec.CmdGC: {
			required:    []string{spec.EnvVersion, spec.EnvValidRequestIDs},
			minVersion:  spec.Version010,
			implemented: func(p *Plugin) bool { return p.GC != nil },
			run: func(p *Plugin, a *Args) (jsonDocument, error) {
				r, err := p.GC(a)
				return versioned(r, err, func(r *spec.GCResult) jsonDocument {
					out := *r
					out.CDIVersion = a.Version
					if out.Released == nil {
						out.Released = []string{}
					}
					return out
				})
			},
		},
	}
}

// versioned turns a callback's (result, error) into the document to print.
// A nil result without an error is a plugin bug, reported as code 14.
func versioned[R any](r *R, err error, conv func(*R) jsonDocument) (jsonDocument, error) {
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, spec.NewError(spec.CodeInternal, "plugin returned neither a result nor an error")
	}
	return conv(r), nil
}

// lookupCommand finds cmd in the table and checks that every variable it
// requires is set, reporting all missing ones at once.
func (d *Dispatcher) lookupCommand(p *Plugin, cmd string) (commandSpec, error) {
	if cmd == "" {
		missing := []string{spec.EnvCommand}
		if d.getenv(spec.EnvVersion) == "" {
			missing = append(missing, spec.EnvVersion)
		}
		return commandSpec{}, spec.NewError(spec.CodeMissingParameter, "Missing environment variable(s): %s", strings.Join(missing, ", "))
	}
	cs, ok := commandTable()[cmd]
	if !ok || !cs.implemented(p) {
		return commandSpec{}, spec.NewError(spec.CodeUnsupportedCommand, "Unsupported command: %s", d.getenv(spec.EnvCommand))
	}
	var missing []string
	for _, name := range cs.required {
		if v, set := d.LookupEnv(name); !set || (v == "" && name != spec.EnvValidRequestIDs) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return commandSpec{}, spec.NewError(spec.CodeMissingParameter, "Missing environment variable(s) for %s: %s", cmd, strings.Join(missing, ", "))
	}
	return cs, nil
}

// parseParams parses the parameters cmd takes into args; a malformed value
// is code 7, naming the variable. Every malformed variable is reported.
func (d *Dispatcher) parseParams(cmd string, args *Args) error {
	var problems []string
	parse := func(name string, f func(string) error) {
		v, set := d.LookupEnv(name)
		if !set || (v == "" && name != spec.EnvValidRequestIDs) {
			return
		}
		if err := f(v); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
		}
	}
	switch cmd {
	case spec.CmdAdd:
		parse(spec.EnvRequest, func(v string) (err error) { args.Request, err = spec.ParseRequest(v); return })
		parse(spec.EnvRequestID, func(v string) error { args.RequestID = v; return spec.CheckRequestID(v) })
		parse(spec.EnvNUMALocality, func(v string) (err error) { args.NUMANodes, err = spec.ParseNUMANodes(v); return })
		parse(spec.EnvRequestDevices, func(v string) (err error) {
			if !spec.AtLeast(args.Version, spec.Version010) {
				return fmt.Errorf("needs cdiVersion %s or newer, the call uses %s", spec.Version010, args.Version)
			}
			args.Devices, err = spec.ParseDeviceIDs(v)
			return
		})
	case spec.CmdDel:
		parse(spec.EnvRequestID, func(v string) error { args.RequestID = v; return spec.CheckRequestID(v) })
	case spec.CmdGC:
		parse(spec.EnvValidRequestIDs, func(v string) (err error) { args.ValidRequestIDs, err = spec.ParseRequestIDs(v); return })
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return spec.NewError(spec.CodeInvalidParameter, "%s", strings.Join(problems, "; "))
	}
	return nil
}

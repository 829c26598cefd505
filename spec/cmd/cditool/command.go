package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/invoke"
)

// command is a checked command line: what to run against which type.
type command struct {
	name      string // version, info, add, del, list, gc or conformance
	typ       string
	plugin    string            // conformance: the plugin's path or name
	requestID string            // add, del
	add       invoke.AddRequest // add
	valid     []string          // gc
}

// single reports whether the command changes one drop-in's state and so must
// not run against several.
func (c *command) single() bool { return c.name == "add" || c.name == "del" }

// argCounts gives the minimum and maximum number of positional arguments a
// command takes after <type>; ok is false for an unknown command.
func argCounts(name string) (lo, hi int, ok bool) {
	switch name {
	case "version", "info", "list":
		return 0, 0, true
	case "add":
		return 2, 2, true
	case "del":
		return 1, 1, true
	case "gc":
		return 0, 1, true
	}
	return 0, 0, false
}

// checkFlags refuses a command-specific flag given to another command.
func checkFlags(o *options, name string) error {
	for _, f := range []struct{ flag, cmd string }{{"numa", "add"}, {"devices", "add"}, {"all", "gc"}} {
		if o.set[f.flag] && f.cmd != name {
			return fmt.Errorf("--%s goes with %s only", f.flag, f.cmd)
		}
	}
	return nil
}

// parseCommand checks the positional arguments and the command-specific
// flags. Every error it returns is a usage error.
func parseCommand(o *options, pos []string) (*command, error) {
	if len(pos) == 0 {
		return nil, errors.New("no command given")
	}
	name := strings.ToLower(pos[0])
	if name == "conformance" {
		return parseConformance(o, pos[1:])
	}
	lo, hi, ok := argCounts(name)
	if !ok {
		return nil, fmt.Errorf("unknown command %q", pos[0])
	}
	if len(pos) < 2 {
		return nil, fmt.Errorf("%s: no resource-type given", name)
	}
	if n := len(pos) - 2; n < lo || n > hi {
		return nil, fmt.Errorf("%s: wrong number of arguments after the type", name)
	}
	if err := checkFlags(o, name); err != nil {
		return nil, err
	}
	c := &command{name: name, typ: pos[1]}
	if err := spec.CheckResourceType(c.typ); err != nil {
		return nil, err
	}
	return c, c.parseArgs(o, pos[2:])
}

func (c *command) parseArgs(o *options, args []string) error {
	switch c.name {
	case "add":
		return c.parseAdd(o, args[0], args[1])
	case "del":
		c.requestID = args[0]
		return spec.CheckRequestID(c.requestID)
	case "gc":
		return c.parseGC(o, args)
	}
	return nil
}

func (c *command) parseAdd(o *options, id, request string) error {
	c.requestID = id
	c.add.RequestID = id
	if err := spec.CheckRequestID(id); err != nil {
		return err
	}
	var err error
	if c.add.Request, err = spec.ParseRequest(request); err != nil {
		return err
	}
	if o.set["numa"] {
		if c.add.NUMANodes, err = spec.ParseNUMANodes(o.numa); err != nil {
			return fmt.Errorf("--numa: %w", err)
		}
	}
	if o.set["devices"] {
		if c.add.Devices, err = spec.ParseDeviceIDs(o.devices); err != nil {
			return fmt.Errorf("--devices: %w", err)
		}
	}
	return nil
}

func (c *command) parseGC(o *options, args []string) error {
	list := ""
	if len(args) == 1 {
		list = args[0]
	}
	switch {
	case list == "" && !o.all:
		return errors.New("gc: give the valid request-ids, or --all to release every allocation")
	case list != "" && o.all:
		return errors.New("gc: give either the valid request-ids or --all, not both")
	}
	var err error
	c.valid, err = spec.ParseRequestIDs(list)
	return err
}

// parseConformance checks "conformance <plugin>": one plugin, and none of
// the flags that pick drop-ins or shape a plugin's output, since the
// drop-in comes on stdin and the output is the rules' table.
func parseConformance(o *options, args []string) (*command, error) {
	if len(args) != 1 || args[0] == "" {
		return nil, errors.New("conformance: give one plugin, a path or a name found in --path, and the drop-in on stdin")
	}
	if err := checkFlags(o, "conformance"); err != nil {
		return nil, err
	}
	for _, f := range []string{"conf", "conf-dir", "cdi-version", "json"} {
		if o.set[f] {
			return nil, fmt.Errorf("--%s does not go with conformance, which reads its drop-in on stdin", f)
		}
	}
	return &command{name: "conformance", plugin: args[0]}, nil
}

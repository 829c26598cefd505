package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cdiexec/cdi/spec/invoke"
)

// perform runs the command and returns how to print its result.
func perform(ctx context.Context, c *command, p *invoke.Plugin) (func(io.Writer), error) {
	switch c.name {
	case "version":
		v, err := p.Version(ctx)
		if err != nil {
			return nil, err
		}
		neg, err := p.Negotiate(ctx)
		if err != nil && !errors.Is(err, invoke.ErrIncompatible) {
			return nil, err
		}
		return func(w io.Writer) { printVersion(w, v, neg, p.CDIVersion != "") }, nil
	case "info":
		r, err := p.Info(ctx)
		return func(w io.Writer) { printInfo(w, r) }, err
	case "add":
		r, err := p.Add(ctx, c.add)
		return func(w io.Writer) { printAdd(w, c.requestID, r) }, err
	case "del":
		err := p.Del(ctx, c.requestID)
		return func(w io.Writer) { fmt.Fprintf(w, "released request-id %s\n", c.requestID) }, err
	case "list":
		r, err := p.List(ctx)
		return func(w io.Writer) { printList(w, r) }, err
	case "gc":
		r, err := p.GC(ctx, c.valid)
		return func(w io.Writer) { printGC(w, r) }, err
	}
	return nil, fmt.Errorf("unknown command %q", c.name)
}

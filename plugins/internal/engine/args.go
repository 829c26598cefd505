package engine

import (
	"fmt"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/plainjson"
)

// Arg is one member of a configuration's args as a plugin reads it: its
// name and kind, where its value goes (whatever is there before the read
// is the default), and the check the value must pass, read or default.
// The engine reads the common args with them, and every family its own,
// through ReadArgs, so that each arg is refused the same way: code 8,
// "args.<name>: <what is wrong>".
//
// When given, a string or a number must be one: null is refused, as a
// value of the wrong kind. A list or an object that is null is absent,
// as SPEC.md says of args itself. Objects, and objects in lists, are read
// strictly: a member their table does not name is refused, so that a
// misspelt key is reported rather than ignored. Args no Arg names are
// left alone: they may be another reader's.
type Arg struct {
	member plainjson.Member
	// check, if not nil, judges the value after every Arg has been read.
	check func() error
}

// String is a string arg.
func String(name string, dst *string, check func(string) error) Arg {
	return Arg{plainjson.String(name, dst).NotNull(), checkOf(dst, check)}
}

// Int is an integer arg; as with encoding/json, 1.0 and 1e3 are not
// integers.
func Int(name string, dst *int, check func(int) error) Arg {
	return Arg{plainjson.Int(name, dst).NotNull(), checkOf(dst, check)}
}

// Strings is a list of strings; null and absent leave *dst nil, [] makes
// it empty.
func Strings(name string, dst *[]string, check func([]string) error) Arg {
	return Arg{plainjson.Strings(name, dst), checkOf(dst, check)}
}

// Object is an object its table describes.
func Object[T any, PT described[T]](name string, dst *T, check func(T) error) Arg {
	return Arg{plainjson.Object[T, PT](name, dst).Strict(), checkOf(dst, check)}
}

// Objects is a list of objects their table describes; a null element
// reads as an empty object, for the check to refuse.
func Objects[T any, PT described[T]](name string, dst *[]T, check func([]T) error) Arg {
	return Arg{plainjson.Objects[T, PT](name, dst).Strict(), checkOf(dst, check)}
}

// described is *T where *T has a table.
type described[T any] interface {
	*T
	plainjson.Described
}

func checkOf[T any](dst *T, check func(T) error) func() error {
	if check == nil {
		return nil
	}
	return func() error { return check(*dst) }
}

// ReadArgs reads cfg's args into the given Args in one pass, then runs
// their checks in order. The first problem is returned as a spec error,
// code 8, that names the arg, and within it the element and member, as
// a path: "args.groups[1].paths: ...". Checks name elements and members
// within their value with plainjson.AtIndex and plainjson.At.
func ReadArgs(cfg *spec.Config, args ...Arg) error {
	table := make(plainjson.Table, len(args))
	for i, a := range args {
		table[i] = a.member
	}
	// ParseConfig has made sure that args is an object, null or absent:
	// absent, the zero Value is null.
	var doc plainjson.Value
	if len(cfg.Args) > 0 {
		var err error
		if doc, err = plainjson.Parse(cfg.Args); err != nil {
			return spec.NewError(spec.CodeInvalidConfig, "args: %w", err)
		}
	}
	if err := plainjson.Read(doc, table); err != nil {
		return spec.NewError(spec.CodeInvalidConfig, "args.%w", err)
	}
	for _, a := range args {
		if a.check == nil {
			continue
		}
		if err := a.check(); err != nil {
			return spec.NewError(spec.CodeInvalidConfig, "args.%w", plainjson.At(a.member.Name(), err))
		}
	}
	return nil
}

// Between returns a check that an integer is from lo to hi.
func Between(lo, hi int) func(int) error {
	return func(n int) error {
		if n < lo || n > hi {
			return fmt.Errorf("must be an integer from %d to %d, not %d", lo, hi, n)
		}
		return nil
	}
}

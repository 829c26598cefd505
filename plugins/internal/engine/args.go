package engine

import (
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// Arg is one member of a configuration's args as a plugin reads it: its
// name, where its value goes (whatever is there before the read is the
// default), and the check the value must pass, read or default. The
// engine reads the common args with them, and every family its own,
// through ReadArgs, so that each arg is refused the same way: code 8,
// "args.<name>: <what is wrong>".
//
// When given, a string or a number must be one: null is refused, as a
// value of the wrong kind. A list or an object that is null is absent,
// as SPEC.md says of args itself. Objects, and objects in lists, are read
// strictly, by their json tags: a member no field names is refused, so
// that a misspelt key is reported rather than ignored. Args no Arg names
// are left alone: they are another reader's (the common args, or the
// family's own), and skel has refused any member that no reader knows
// (Family.Args).
type Arg struct {
	name string
	dst  any
	// check, if not nil, judges the value after every Arg has been read.
	check func() error
}

// String is a string arg.
func String(name string, dst *string, check func(string) error) Arg {
	return Arg{name, dst, checkOf(dst, check)}
}

// Int is an integer arg; as with encoding/json, 1.0 and 1e3 are not
// integers.
func Int(name string, dst *int, check func(int) error) Arg {
	return Arg{name, dst, checkOf(dst, check)}
}

// Strings is a list of strings; null and absent leave *dst nil, [] makes
// it empty.
func Strings(name string, dst *[]string, check func([]string) error) Arg {
	return Arg{name, dst, checkOf(dst, check)}
}

// Object is an object its json tags describe.
func Object[T any](name string, dst *T, check func(T) error) Arg {
	return Arg{name, dst, checkOf(dst, check)}
}

// Objects is a list of objects their json tags describe; a null element
// reads as an empty object, for the check to refuse.
func Objects[T any](name string, dst *[]T, check func([]T) error) Arg {
	return Arg{name, dst, checkOf(dst, check)}
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
// within their value with jsonread.AtIndex and jsonread.At. An arg given
// twice is read twice, the last one counting, as encoding/json would.
func ReadArgs(cfg *spec.Config, args ...Arg) error {
	// ParseConfig has made sure that args is an object, null or absent,
	// nested no deeper than jsonread allows: absent or null, there is
	// nothing to read.
	var err error
	gjson.ParseBytes(cfg.Args).ForEach(func(k, v gjson.Result) bool {
		for _, a := range args {
			if a.name == k.String() {
				err = readArg(a, v)
			}
		}
		return err == nil
	})
	if err != nil {
		return spec.NewError(spec.CodeInvalidConfig, "args.%w", err)
	}
	for _, a := range args {
		if a.check == nil {
			continue
		}
		if err := a.check(); err != nil {
			return spec.NewError(spec.CodeInvalidConfig, "args.%w", jsonread.At(a.name, err))
		}
	}
	return nil
}

// readArg reads one arg's value, strictly. The value is read as a whole
// document is: a string or integer refuses null.
func readArg(a Arg, v gjson.Result) error {
	if err := jsonread.ReadStrict(v, a.dst); err != nil {
		return jsonread.At(a.name, err)
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

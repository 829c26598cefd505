package plainjson

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
)

// ErrType is wrapped by every reader error about a value of the wrong type
// or an unknown member.
var ErrType = errors.New("wrong JSON type")

// MaxDepth is how deeply arrays and objects may nest in a document Parse
// accepts. The project's documents nest six deep at most; gjson's
// validator recurses once per level, so a megabyte of "[" took hundreds of
// megabytes of stack before this bound.
const MaxDepth = 64

// Parse checks that data is one valid JSON document, nested at most
// MaxDepth deep, and returns it. gjson itself does not validate, so every
// reader starts here.
func Parse(data []byte) (gjson.Result, error) {
	if err := checkDepth(data); err != nil {
		return gjson.Result{}, err
	}
	if !gjson.ValidBytes(data) {
		return gjson.Result{}, errors.New("not valid JSON")
	}
	return gjson.ParseBytes(data), nil
}

// checkDepth fails when arrays and objects in data, outside strings, nest
// deeper than MaxDepth. It does not validate: unbalanced brackets are left
// to gjson.
func checkDepth(data []byte) error {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > MaxDepth {
				return fmt.Errorf("not valid JSON: nested deeper than %d", MaxDepth)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}

// Fields maps member names to the readers of their values.
type Fields map[string]func(gjson.Result) error

// Object reads object v member by member. Unknown members are skipped
// unless strict, when they are an error, so that a misspelt key in a
// configuration is reported rather than ignored. null reads as an empty
// object. Errors name the member they arose in.
func Object(v gjson.Result, fields Fields, strict bool) error {
	if v.Type == gjson.Null {
		return nil
	}
	if !v.IsObject() {
		return typeError(v, "an object")
	}
	var err error
	v.ForEach(func(k, val gjson.Result) bool {
		read, ok := fields[k.String()]
		if !ok {
			if strict {
				err = fmt.Errorf("unknown field %q: %w", k.String(), ErrType)
			}
			return !strict
		}
		if e := read(val); e != nil {
			err = fmt.Errorf("%s: %w", k.String(), e)
			return false
		}
		return true
	})
	return err
}

// Array reads array v element by element; null reads as no elements.
func Array(v gjson.Result, read func(int, gjson.Result) error) error {
	if v.Type == gjson.Null {
		return nil
	}
	if !v.IsArray() {
		return typeError(v, "an array")
	}
	var err error
	i := 0
	v.ForEach(func(_, val gjson.Result) bool {
		if e := read(i, val); e != nil {
			err = fmt.Errorf("[%d]: %w", i, e)
			return false
		}
		i++
		return true
	})
	return err
}

// String reads a string into dst; null leaves dst as it is.
func String(dst *string) func(gjson.Result) error {
	return func(v gjson.Result) error {
		switch v.Type {
		case gjson.Null:
			return nil
		case gjson.String:
			*dst = v.String()
			return nil
		}
		return typeError(v, "a string")
	}
}

// Int reads an integer into dst; null leaves dst as it is.
func Int(dst *int) func(gjson.Result) error {
	return func(v gjson.Result) error {
		if v.Type == gjson.Null {
			return nil
		}
		n, err := toInt(v)
		if err == nil {
			*dst = n
		}
		return err
	}
}

// Bool reads true or false into dst; null leaves dst as it is.
func Bool(dst *bool) func(gjson.Result) error {
	return func(v gjson.Result) error {
		switch v.Type {
		case gjson.Null:
			return nil
		case gjson.True, gjson.False:
			*dst = v.Bool()
			return nil
		}
		return typeError(v, "true or false")
	}
}

// List reads an array into dst, each element with read; null sets dst to
// nil and [] to an empty slice.
func List[T any](dst *[]T, read func(*T, gjson.Result) error) func(gjson.Result) error {
	return func(v gjson.Result) error {
		var out []T
		if v.Type != gjson.Null {
			out = []T{}
		}
		err := Array(v, func(_ int, e gjson.Result) error {
			var x T
			err := read(&x, e)
			out = append(out, x)
			return err
		})
		if err == nil {
			*dst = out
		}
		return err
	}
}

// Strings reads an array of strings into dst; null sets dst to nil. A null
// element is refused.
func Strings(dst *[]string) func(gjson.Result) error { return List(dst, stringElem) }

// stringElem reads one element of a list or map of strings; null is not
// a string.
func stringElem(s *string, e gjson.Result) error {
	if e.Type != gjson.String {
		return typeError(e, "a string")
	}
	*s = e.String()
	return nil
}

// Ints reads an array of integers into dst; null sets dst to nil. A null
// element is refused.
func Ints(dst *[]int) func(gjson.Result) error {
	return List(dst, func(n *int, e gjson.Result) (err error) {
		*n, err = toInt(e)
		return err
	})
}

// IntPtr reads an integer into a new int at *dst; null sets *dst to nil,
// for optional members whose zero is a valid value.
func IntPtr(dst **int) func(gjson.Result) error {
	return func(v gjson.Result) error {
		if v.Type == gjson.Null {
			*dst = nil
			return nil
		}
		n, err := toInt(v)
		if err == nil {
			*dst = &n
		}
		return err
	}
}

// Map reads an object into dst, each member's value with read; null sets
// dst to nil and {} to an empty map. A member's error names its key.
func Map[T any](dst *map[string]T, read func(*T, gjson.Result) error) func(gjson.Result) error {
	return func(v gjson.Result) error {
		if v.Type == gjson.Null {
			*dst = nil
			return nil
		}
		if !v.IsObject() {
			return typeError(v, "an object")
		}
		out := map[string]T{}
		var err error
		v.ForEach(func(k, e gjson.Result) bool {
			var x T
			if err = read(&x, e); err != nil {
				err = fmt.Errorf("%s: %w", k.String(), err)
				return false
			}
			out[k.String()] = x
			return true
		})
		if err == nil {
			*dst = out
		}
		return err
	}
}

// StringMap reads an object of strings into dst; null sets dst to nil. A
// null member is refused.
func StringMap(dst *map[string]string) func(gjson.Result) error { return Map(dst, stringElem) }

// Time reads an RFC 3339 timestamp, as time.Time's MarshalJSON writes it.
func Time(dst *time.Time) func(gjson.Result) error {
	return func(v gjson.Result) error {
		if v.Type == gjson.Null {
			return nil
		}
		if v.Type != gjson.String {
			return typeError(v, "an RFC 3339 time")
		}
		t, err := time.Parse(time.RFC3339, v.String())
		if err != nil {
			return fmt.Errorf("%w: %w", ErrType, err)
		}
		*dst = t
		return nil
	}
}

// toInt returns v as an int if it is written as one that fits: as with
// encoding/json, 1.0 and 1e3 are not integers.
func toInt(v gjson.Result) (int, error) {
	if v.Type != gjson.Number {
		return 0, typeError(v, "an integer")
	}
	n, err := strconv.Atoi(v.Raw)
	if err != nil {
		return 0, typeError(v, "an integer")
	}
	return n, nil
}

// typeError says what v should have been, quoting a short excerpt of it.
func typeError(v gjson.Result, want string) error {
	raw := v.Raw
	if len(raw) > 40 {
		raw = raw[:40] + "..."
	}
	if raw == "" {
		raw = "nothing"
	}
	return fmt.Errorf("%w: want %s, got %s", ErrType, want, raw)
}

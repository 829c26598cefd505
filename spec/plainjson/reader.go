package plainjson

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrType is wrapped by every reader error about a value of the wrong type
// or an unknown member.
var ErrType = errors.New("wrong JSON type")

// MaxDepth is how deeply arrays and objects may nest in a document Parse
// accepts. The project's documents nest six deep at most; Parse recurses
// once per level, so that a megabyte of "[" would take hundreds of
// megabytes of stack without this bound.
const MaxDepth = 64

// readNullable reads v into dst with read, leaving dst as it was where v
// is null unless o refuses null.
func readNullable[T any](dst *T, v Value, o readOptions, read func(*T, Value) error) error {
	if v.Kind == KindNull && !o.notNull {
		return nil
	}
	return read(dst, v)
}

func readString(dst *string, v Value) error {
	if v.Kind != KindString {
		return typeError(v, "a string")
	}
	*dst = v.String()
	return nil
}

func readInt(dst *int, v Value) error {
	n, err := toInt(v)
	if err == nil {
		*dst = n
	}
	return err
}

func readBool(dst *bool, v Value) error {
	if v.Kind != KindTrue && v.Kind != KindFalse {
		return typeError(v, "true or false")
	}
	*dst = v.Kind == KindTrue
	return nil
}

// readTime reads an RFC 3339 timestamp, as time.Time's MarshalJSON writes
// it.
func readTime(dst *time.Time, v Value) error {
	if v.Kind != KindString {
		return typeError(v, "an RFC 3339 time")
	}
	t, err := time.Parse(time.RFC3339, v.String())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrType, err)
	}
	*dst = t
	return nil
}

// readIntPtr reads an integer into a new int at *dst; null sets *dst to
// nil.
func readIntPtr(dst **int, v Value) error {
	if v.Kind == KindNull {
		*dst = nil
		return nil
	}
	n, err := toInt(v)
	if err == nil {
		*dst = &n
	}
	return err
}

// readList reads array v into dst, each element with read; null sets dst
// to nil and [] to an empty slice. On error dst is left as it was, and
// the error names the element.
func readList[T any](dst *[]T, v Value, read func(*T, Value) error) error {
	if v.Kind == KindNull {
		*dst = nil
		return nil
	}
	if !v.IsArray() {
		return typeError(v, "an array")
	}
	out := []T{}
	var err error
	v.Elements(func(e Value) bool {
		var x T
		if err = read(&x, e); err != nil {
			err = AtIndex(len(out), err)
			return false
		}
		out = append(out, x)
		return true
	})
	if err == nil {
		*dst = out
	}
	return err
}

// readStringMap reads an object of strings into dst; null sets dst to nil
// and {} to an empty map. A member's error names its key.
func readStringMap(dst *map[string]string, v Value) error {
	if v.Kind == KindNull {
		*dst = nil
		return nil
	}
	if !v.IsObject() {
		return typeError(v, "an object")
	}
	out := map[string]string{}
	var err error
	v.Members(func(name string, e Value) bool {
		var s string
		if err = readString(&s, e); err != nil {
			err = At(name, err)
			return false
		}
		out[name] = s
		return true
	})
	if err == nil {
		*dst = out
	}
	return err
}

// toInt returns v as an int if it is written as one that fits: as with
// encoding/json, 1.0 and 1e3 are not integers.
func toInt(v Value) (int, error) {
	if v.Kind != KindNumber {
		return 0, typeError(v, "an integer")
	}
	n, err := strconv.Atoi(v.Raw)
	if err != nil {
		return 0, typeError(v, "an integer")
	}
	return n, nil
}

// typeError says what v should have been, quoting a short excerpt of it.
func typeError(v Value, want string) error {
	raw := v.Raw
	if len(raw) > 40 {
		raw = raw[:40] + "..."
	}
	if raw == "" {
		raw = "nothing"
	}
	return fmt.Errorf("%w: want %s, got %s", ErrType, want, raw)
}

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

// readNullable reads v into dst with read, leaving dst as it was where v
// is null unless o refuses null.
func readNullable[T any](dst *T, v gjson.Result, o readOptions, read func(*T, gjson.Result) error) error {
	if v.Type == gjson.Null && !o.notNull {
		return nil
	}
	return read(dst, v)
}

func readString(dst *string, v gjson.Result) error {
	if v.Type != gjson.String {
		return typeError(v, "a string")
	}
	*dst = v.String()
	return nil
}

func readInt(dst *int, v gjson.Result) error {
	n, err := toInt(v)
	if err == nil {
		*dst = n
	}
	return err
}

func readBool(dst *bool, v gjson.Result) error {
	if v.Type != gjson.True && v.Type != gjson.False {
		return typeError(v, "true or false")
	}
	*dst = v.Bool()
	return nil
}

// readTime reads an RFC 3339 timestamp, as time.Time's MarshalJSON writes
// it.
func readTime(dst *time.Time, v gjson.Result) error {
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

// readIntPtr reads an integer into a new int at *dst; null sets *dst to
// nil.
func readIntPtr(dst **int, v gjson.Result) error {
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

// readList reads array v into dst, each element with read; null sets dst
// to nil and [] to an empty slice. On error dst is left as it was, and
// the error names the element.
func readList[T any](dst *[]T, v gjson.Result, read func(*T, gjson.Result) error) error {
	if v.Type == gjson.Null {
		*dst = nil
		return nil
	}
	if !v.IsArray() {
		return typeError(v, "an array")
	}
	out := []T{}
	var err error
	v.ForEach(func(_, e gjson.Result) bool {
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
func readStringMap(dst *map[string]string, v gjson.Result) error {
	if v.Type == gjson.Null {
		*dst = nil
		return nil
	}
	if !v.IsObject() {
		return typeError(v, "an object")
	}
	out := map[string]string{}
	var err error
	v.ForEach(func(k, e gjson.Result) bool {
		var s string
		if err = readString(&s, e); err != nil {
			err = At(k.String(), err)
			return false
		}
		out[k.String()] = s
		return true
	})
	if err == nil {
		*dst = out
	}
	return err
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

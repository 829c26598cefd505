package jsonread

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// ErrType is wrapped by every reader error about a value of the wrong
// type, an unknown member (ReadStrict) or a map key given twice.
var ErrType = errors.New("wrong JSON type")

// Read reads v into the value dst points to, as its json tags describe it,
// skipping members no field names, so that newer documents still load.
//
// null as a member's value leaves a string, number, boolean, time or
// struct as it was, and sets a pointer, slice or map to nil; [] and {}
// read as empty, not nil. Elsewhere (v itself, elements of slices and
// maps) null is refused for a string, number, boolean or time, and reads
// as nil or, for a struct, leaves it as it was. Errors name the member
// and element they arose in (PathError).
func Read(v gjson.Result, dst any) error { return reader{}.read(v, dst) }

// ReadStrict is Read refusing, with ErrType, members that no field names,
// in v and in every object inside it, so that a misspelt key in a
// configuration is reported rather than ignored.
func ReadStrict(v gjson.Result, dst any) error { return reader{strict: true}.read(v, dst) }

type reader struct{ strict bool }

func (r reader) read(v gjson.Result, dst any) error {
	p := reflect.ValueOf(dst)
	if p.Kind() != reflect.Pointer || p.IsNil() {
		return fmt.Errorf("jsonread: want a non-nil pointer, got %T", dst)
	}
	return r.element(v, p.Elem())
}

// rawType and timeType read otherwise than their kinds.
var (
	rawType  = reflect.TypeFor[json.RawMessage]()
	timeType = reflect.TypeFor[time.Time]()
)

// member reads the value of an object's member: null leaves what cannot
// be nil as it was.
func (r reader) member(v gjson.Result, dst reflect.Value) error {
	if v.Type == gjson.Null && !nilable(dst.Kind()) && dst.Type() != rawType {
		return nil
	}
	return r.value(v, dst)
}

// element reads a value that is not a member's, an element of a slice or
// map or a whole document: null leaves a struct as it was, sets what can
// be nil to nil, and is refused for anything else.
func (r reader) element(v gjson.Result, dst reflect.Value) error {
	if v.Type == gjson.Null && dst.Kind() == reflect.Struct && dst.Type() != timeType {
		return nil
	}
	return r.value(v, dst)
}

func nilable(k reflect.Kind) bool {
	return k == reflect.Pointer || k == reflect.Slice || k == reflect.Map
}

func (r reader) value(v gjson.Result, dst reflect.Value) error {
	switch t := dst.Type(); {
	case t == rawType:
		dst.SetBytes([]byte(v.Raw))
		return nil
	case t == timeType:
		return readTime(v, dst)
	}
	switch dst.Kind() {
	case reflect.String:
		if v.Type != gjson.String {
			return typeError(v, "a string")
		}
		dst.SetString(validUTF8(v.String()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return readInt(v, dst)
	case reflect.Bool:
		if v.Type != gjson.True && v.Type != gjson.False {
			return typeError(v, "true or false")
		}
		dst.SetBool(v.Type == gjson.True)
	case reflect.Pointer:
		return r.pointer(v, dst)
	case reflect.Slice:
		return r.slice(v, dst)
	case reflect.Map:
		return r.mapOf(v, dst)
	case reflect.Struct:
		return r.object(v, dst)
	default:
		return fmt.Errorf("jsonread: cannot read into a %s", dst.Type())
	}
	return nil
}

// readInt reads an integer written as one that fits: as with
// encoding/json, 1.0 and 1e3 are not integers.
func readInt(v gjson.Result, dst reflect.Value) error {
	if v.Type != gjson.Number {
		return typeError(v, "an integer")
	}
	n, err := strconv.ParseInt(v.Raw, 10, dst.Type().Bits())
	if err != nil {
		return typeError(v, "an integer")
	}
	dst.SetInt(n)
	return nil
}

// readTime reads an RFC 3339 timestamp, as time.Time's MarshalJSON writes
// it.
func readTime(v gjson.Result, dst reflect.Value) error {
	if v.Type != gjson.String {
		return typeError(v, "an RFC 3339 time")
	}
	t, err := time.Parse(time.RFC3339, v.String())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrType, err)
	}
	dst.Set(reflect.ValueOf(t))
	return nil
}

func (r reader) pointer(v gjson.Result, dst reflect.Value) error {
	if v.Type == gjson.Null {
		dst.SetZero()
		return nil
	}
	p := reflect.New(dst.Type().Elem())
	if err := r.value(v, p.Elem()); err != nil {
		return err
	}
	dst.Set(p)
	return nil
}

// slice reads an array; on error dst is left as it was.
func (r reader) slice(v gjson.Result, dst reflect.Value) error {
	if v.Type == gjson.Null {
		dst.SetZero()
		return nil
	}
	if !v.IsArray() {
		return typeError(v, "an array")
	}
	out := reflect.MakeSlice(dst.Type(), 0, 0)
	var err error
	v.ForEach(func(_, e gjson.Result) bool {
		x := reflect.New(dst.Type().Elem()).Elem()
		if err = r.element(e, x); err != nil {
			err = AtIndex(out.Len(), err)
			return false
		}
		out = reflect.Append(out, x)
		return true
	})
	if err == nil {
		dst.Set(out)
	}
	return err
}

// mapOf reads an object of values by key; on error dst is left as it
// was. A key given twice is refused: the map would keep one of its values.
func (r reader) mapOf(v gjson.Result, dst reflect.Value) error {
	if v.Type == gjson.Null {
		dst.SetZero()
		return nil
	}
	if !v.IsObject() || dst.Type().Key().Kind() != reflect.String {
		return typeError(v, "an object")
	}
	out := reflect.MakeMap(dst.Type())
	var err error
	v.ForEach(func(k, e gjson.Result) bool {
		key := reflect.New(dst.Type().Key()).Elem()
		key.SetString(validUTF8(k.String()))
		if out.MapIndex(key).IsValid() {
			err = fmt.Errorf("%w: %q appears twice", ErrType, key.String())
			return false
		}
		x := reflect.New(dst.Type().Elem()).Elem()
		if err = r.element(e, x); err != nil {
			err = At(k.String(), err)
			return false
		}
		out.SetMapIndex(key, x)
		return true
	})
	if err == nil {
		dst.Set(out)
	}
	return err
}

// object reads an object into a struct by its fields' json tags; a member
// given twice is read twice, the last one counting, as with
// encoding/json.
func (r reader) object(v gjson.Result, dst reflect.Value) error {
	if v.Type == gjson.Null {
		return nil
	}
	if !v.IsObject() {
		return typeError(v, "an object")
	}
	var err error
	v.ForEach(func(k, e gjson.Result) bool {
		name := k.String()
		switch f, ok := field(dst, name); {
		case ok:
			if err = r.member(e, f); err != nil {
				err = At(name, err)
			}
		case r.strict:
			err = fmt.Errorf("unknown field %q: %w", name, ErrType)
		}
		return err == nil
	})
	return err
}

// field returns the field of struct s whose json name is name, exactly.
// Structs are small: a scan is cheaper than a table built per type.
func field(s reflect.Value, name string) (reflect.Value, bool) {
	t := s.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return s.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// validUTF8 returns s with every byte that is not UTF-8 replaced by
// U+FFFD, as encoding/json reads a string: the text then writes back as
// it reads, so that a state read and saved again is the same document.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		b = utf8.AppendRune(b, r)
		i += size
	}
	return string(b)
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

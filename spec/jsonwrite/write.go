package jsonwrite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrUnsupported is wrapped by the error for a value of a kind the wire
// types do not use.
var ErrUnsupported = errors.New("jsonwrite: unsupported type")

// Marshal returns v as json.Marshal would, but with <, > and & left as
// they are.
func Marshal(v any) ([]byte, error) {
	return appendValue(nil, reflect.ValueOf(v))
}

// MarshalIndent returns v as json.MarshalIndent(v, "", indent) would,
// but with <, > and & left as they are, and a newline after it, as
// json.Encoder writes a document.
func MarshalIndent(v any, indent string) ([]byte, error) {
	compact, err := Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(2 * len(compact))
	if err := json.Indent(&out, compact, "", indent); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

var marshalerType = reflect.TypeFor[json.Marshaler]()

func appendValue(b []byte, v reflect.Value) ([]byte, error) {
	if !v.IsValid() {
		return append(b, "null"...), nil
	}
	if v.Type().Implements(marshalerType) && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		return appendMarshaler(b, v.Interface().(json.Marshaler))
	}
	switch v.Kind() {
	case reflect.String:
		return AppendString(b, v.String()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool()), nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		return appendValue(b, v.Elem())
	case reflect.Slice:
		return appendSlice(b, v)
	case reflect.Map:
		return appendMap(b, v)
	case reflect.Struct:
		return appendStruct(b, v)
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupported, v.Type())
}

// appendMarshaler appends what m writes of itself, compacted, as
// encoding/json does.
func appendMarshaler(b []byte, m json.Marshaler) ([]byte, error) {
	raw, err := m.MarshalJSON()
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func appendSlice(b []byte, v reflect.Value) ([]byte, error) {
	if v.IsNil() {
		return append(b, "null"...), nil
	}
	if v.Type().Elem().Kind() == reflect.Uint8 {
		return nil, fmt.Errorf("%w: %s (encoding/json writes it as base64)", ErrUnsupported, v.Type())
	}
	b = append(b, '[')
	for i := range v.Len() {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendValue(b, v.Index(i)); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// appendMap writes a map in key order, as encoding/json does.
func appendMap(b []byte, v reflect.Value) ([]byte, error) {
	if v.IsNil() {
		return append(b, "null"...), nil
	}
	if v.Type().Key().Kind() != reflect.String {
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, v.Type())
	}
	keys := v.MapKeys()
	slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(AppendString(b, k.String()), ':')
		var err error
		if b, err = appendValue(b, v.MapIndex(k)); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendStruct writes a struct's exported fields in order, by their json
// tags, leaving out "-" and the empty omitempty ones.
func appendStruct(b []byte, v reflect.Value) ([]byte, error) {
	t := v.Type()
	b = append(b, '{')
	first := true
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			// encoding/json would lift the embedded struct's fields, even
			// an unexported one's.
			return nil, fmt.Errorf("%w: embedded field %s.%s", ErrUnsupported, t, f.Name)
		}
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		fv := v.Field(i)
		if hasOption(opts, "omitempty") && isEmpty(fv) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(AppendString(b, name), ':')
		var err error
		if b, err = appendValue(b, fv); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func hasOption(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

// isEmpty is encoding/json's rule for omitempty.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping off: \" \\ \b \f \n \r \t, other control
// characters as \u00XX, U+2028 and U+2029 as \u2028 and \u2029, and bytes
// that are not UTF-8 as \ufffd.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

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
	"time"
	"unicode/utf8"
)

// ErrUnsupported is wrapped by the error for a value of a kind the wire
// types do not use.
var ErrUnsupported = errors.New("jsonwrite: unsupported type")

// Marshal returns v as json.Marshal would, but with <, > and & left as
// they are.
func Marshal(v any) ([]byte, error) {
	return writer{}.value(make([]byte, 0, firstBuffer), reflect.ValueOf(v), 0)
}

// MarshalIndent returns v as json.MarshalIndent(v, "", indent) would,
// but with <, > and & left as they are, and a newline after it, as
// json.Encoder writes a document. It indents as it writes: writing the
// compact document and then indenting it with json.Indent ran
// encoding/json's scanner over every byte, and built a second buffer.
func MarshalIndent(v any, indent string) ([]byte, error) {
	b, err := writer{indent: indent}.value(make([]byte, 0, firstBuffer), reflect.ValueOf(v), 0)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// firstBuffer is the capacity a document is written into from the start,
// enough for a plugin's result and a small state file: a buffer grown
// from nothing allocates every size on the way, each of a size class the
// process may not have touched yet, a fresh page to fault in.
const firstBuffer = 1024

// writer writes one document: compact where indent is "", else as
// json.Indent would lay it out, each element on its own line indented by
// its depth.
type writer struct{ indent string }

// newline starts the line of an element at depth, if indenting.
func (w writer) newline(b []byte, depth int) []byte {
	if w.indent == "" {
		return b
	}
	b = append(b, '\n')
	for range depth {
		b = append(b, w.indent...)
	}
	return b
}

// key writes an object member's name and the colon after it.
func (w writer) key(b []byte, name string) []byte {
	b = append(AppendString(b, name), ':')
	if w.indent != "" {
		b = append(b, ' ')
	}
	return b
}

var (
	marshalerType = reflect.TypeFor[json.Marshaler]()
	timeType      = reflect.TypeFor[time.Time]()
)

// value writes v. Its frame, and those of the writers of containers it
// calls, are on the stack once per level of the document: kept small, a
// plugin's state (six levels) is written without growing the goroutine's
// stack to 16 KiB, a growth that copies the stack and faults in fresh
// pages. So pointers are followed in a loop, not by recursion, and what
// only a leaf needs is in functions of its own.
func (w writer) value(b []byte, v reflect.Value, depth int) ([]byte, error) {
	for {
		if !v.IsValid() {
			return append(b, "null"...), nil
		}
		if b, done, err := w.special(b, v, depth); done {
			return b, err
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if v.IsNil() {
				return append(b, "null"...), nil
			}
			v = v.Elem()
			continue
		case reflect.Slice:
			return w.slice(b, v, depth)
		case reflect.Map:
			return w.mapOf(b, v, depth)
		case reflect.Struct:
			return w.structOf(b, v, depth)
		}
		return scalar(b, v)
	}
}

// special writes v if it is a time or writes itself (json.Marshaler).
//
//go:noinline
func (w writer) special(b []byte, v reflect.Value, depth int) ([]byte, bool, error) {
	if v.Type() == timeType {
		b, err := appendTime(b, v.Interface().(time.Time))
		return b, true, err
	}
	if v.Type().Implements(marshalerType) && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		b, err := w.marshaler(b, v.Interface().(json.Marshaler), depth)
		return b, true, err
	}
	return b, false, nil
}

// scalar writes a string, an integer or a boolean.
//
//go:noinline
func scalar(b []byte, v reflect.Value) ([]byte, error) {
	switch v.Kind() {
	case reflect.String:
		return AppendString(b, v.String()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool()), nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnsupported, v.Type())
}

// appendTime writes t as its MarshalJSON does. encoding/json compacts what
// a Marshaler writes, which leaves a time's quoted RFC 3339 text as it
// is: written directly, a time needs none of encoding/json's scanner.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	raw, err := t.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return append(b, raw...), nil
}

// marshaler appends what m writes of itself, compacted as encoding/json
// does, and indented at depth as json.Indent would indent it within the
// whole document.
func (w writer) marshaler(b []byte, m json.Marshaler, depth int) ([]byte, error) {
	raw, err := m.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, err
	}
	if w.indent == "" {
		return append(b, compact.Bytes()...), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Indent(buf, compact.Bytes(), strings.Repeat(w.indent, depth), w.indent); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (w writer) slice(b []byte, v reflect.Value, depth int) ([]byte, error) {
	if v.IsNil() {
		return append(b, "null"...), nil
	}
	if v.Type().Elem().Kind() == reflect.Uint8 {
		return nil, fmt.Errorf("%w: %s (encoding/json writes it as base64)", ErrUnsupported, v.Type())
	}
	if v.Len() == 0 {
		return append(b, "[]"...), nil
	}
	b = append(b, '[')
	for i := range v.Len() {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = w.value(w.newline(b, depth+1), v.Index(i), depth+1); err != nil {
			return nil, err
		}
	}
	return append(w.newline(b, depth), ']'), nil
}

// mapOf writes a map in key order, as encoding/json does.
func (w writer) mapOf(b []byte, v reflect.Value, depth int) ([]byte, error) {
	if v.IsNil() {
		return append(b, "null"...), nil
	}
	if v.Type().Key().Kind() != reflect.String {
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, v.Type())
	}
	if v.Len() == 0 {
		return append(b, "{}"...), nil
	}
	keys := v.MapKeys()
	slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = w.key(w.newline(b, depth+1), k.String())
		var err error
		if b, err = w.value(b, v.MapIndex(k), depth+1); err != nil {
			return nil, err
		}
	}
	return append(w.newline(b, depth), '}'), nil
}

// structOf writes a struct's exported fields in order, by their json
// tags, leaving out "-" and the empty omitempty ones.
func (w writer) structOf(b []byte, v reflect.Value, depth int) ([]byte, error) {
	b = append(b, '{')
	first := true
	for i := range v.NumField() {
		name, ok, err := member(v, i)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = w.key(w.newline(b, depth+1), name)
		if b, err = w.value(b, v.Field(i), depth+1); err != nil {
			return nil, err
		}
	}
	if !first {
		b = w.newline(b, depth)
	}
	return append(b, '}'), nil
}

// member returns the name field i of struct v is written under, and
// whether it is written at all: not when unexported, tagged "-", or
// omitempty and empty. Apart from structOf, so that the reflect.StructField
// it reads is not on the stack once per level of the document.
//
//go:noinline
func member(v reflect.Value, i int) (string, bool, error) {
	f := v.Type().Field(i)
	if f.Anonymous {
		// encoding/json would lift the embedded struct's fields, even
		// an unexported one's.
		return "", false, fmt.Errorf("%w: embedded field %s.%s", ErrUnsupported, v.Type(), f.Name)
	}
	tag := f.Tag.Get("json")
	if !f.IsExported() || tag == "-" {
		return "", false, nil
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	if hasOption(opts, "omitempty") && isEmpty(v.Field(i)) {
		return "", false, nil
	}
	return name, true, nil
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

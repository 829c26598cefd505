package plainjson

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// Writer appends one JSON document to a byte slice. Keys and values are
// written in the order of the calls; the caller sorts map keys where the
// output must be deterministic. Calls out of JSON's grammar (a value
// where a key is due) are the caller's bug and produce invalid JSON, which
// the caller's tests catch by decoding what it wrote.
type Writer struct {
	buf    []byte
	indent string
	// open holds, per open object or array, how many members it has so far.
	open []int
	// keyed is true between a Key and its value.
	keyed bool
	// tables holds the tables of the objects Object is writing, the
	// innermost last.
	tables []Member
}

// NewWriter returns a Writer. An empty indent writes compact JSON; any
// other indents nested members as json.MarshalIndent(v, "", indent) does.
func NewWriter(indent string) *Writer {
	// Room for the project's deepest documents from the start: each
	// allocation of a new size is a fresh page for a plugin to fault in.
	return &Writer{buf: make([]byte, 0, 512), indent: indent, open: make([]int, 0, 8), tables: newTables()}
}

// Bytes returns the document written so far.
func (w *Writer) Bytes() []byte { return w.buf }

// BeginObject opens an object.
func (w *Writer) BeginObject() { w.value(); w.buf = append(w.buf, '{'); w.open = append(w.open, 0) }

// EndObject closes the innermost object.
func (w *Writer) EndObject() { w.end('}') }

// BeginArray opens an array.
func (w *Writer) BeginArray() { w.value(); w.buf = append(w.buf, '['); w.open = append(w.open, 0) }

// EndArray closes the innermost array.
func (w *Writer) EndArray() { w.end(']') }

// Key writes the key of the next object member.
func (w *Writer) Key(k string) {
	w.member()
	w.buf = AppendString(w.buf, k)
	w.buf = append(w.buf, ':')
	if w.indent != "" {
		w.buf = append(w.buf, ' ')
	}
	w.keyed = true
}

// String writes a string value.
func (w *Writer) String(s string) { w.value(); w.buf = AppendString(w.buf, s) }

// Int writes an integer value.
func (w *Writer) Int(n int) { w.value(); w.buf = strconv.AppendInt(w.buf, int64(n), 10) }

// Bool writes true or false.
func (w *Writer) Bool(b bool) { w.value(); w.buf = strconv.AppendBool(w.buf, b) }

// Null writes null.
func (w *Writer) Null() { w.value(); w.buf = append(w.buf, "null"...) }

// Strings writes an array of strings; nil is written as null, as
// encoding/json does.
func (w *Writer) Strings(ss []string) {
	if ss == nil {
		w.Null()
		return
	}
	w.BeginArray()
	for _, s := range ss {
		w.String(s)
	}
	w.EndArray()
}

// Ints writes an array of integers; nil is written as null.
func (w *Writer) Ints(ns []int) {
	if ns == nil {
		w.Null()
		return
	}
	w.BeginArray()
	for _, n := range ns {
		w.Int(n)
	}
	w.EndArray()
}

// StringMap writes an object of string members in key order, as
// encoding/json does; nil is written as null.
func (w *Writer) StringMap(m map[string]string) {
	if m == nil {
		w.Null()
		return
	}
	w.BeginObject()
	for _, k := range SortedKeys(m) {
		w.Key(k)
		w.String(m[k])
	}
	w.EndObject()
}

// The OmitEmpty methods write a member only when its value is not empty,
// as a json tag's omitempty does.

// OmitEmptyString writes key and s unless s is "".
func (w *Writer) OmitEmptyString(key, s string) {
	if s != "" {
		w.Key(key)
		w.String(s)
	}
}

// OmitEmptyStrings writes key and ss unless ss is empty.
func (w *Writer) OmitEmptyStrings(key string, ss []string) {
	if len(ss) > 0 {
		w.Key(key)
		w.Strings(ss)
	}
}

// OmitEmptyInts writes key and ns unless ns is empty.
func (w *Writer) OmitEmptyInts(key string, ns []int) {
	if len(ns) > 0 {
		w.Key(key)
		w.Ints(ns)
	}
}

// OmitEmptyStringMap writes key and m unless m is empty.
func (w *Writer) OmitEmptyStringMap(key string, m map[string]string) {
	if len(m) > 0 {
		w.Key(key)
		w.StringMap(m)
	}
}

// SortedKeys returns m's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// value prepares for a value: after a key nothing is needed, inside an
// array it is a new member.
func (w *Writer) value() {
	if w.keyed {
		w.keyed = false
		return
	}
	w.member()
}

// member writes the separator and indentation before a member of the
// innermost open object or array, and counts it.
func (w *Writer) member() {
	depth := len(w.open)
	if depth == 0 {
		return
	}
	if w.open[depth-1] > 0 {
		w.buf = append(w.buf, ',')
	}
	w.open[depth-1]++
	w.newline(depth)
}

// end closes the innermost object or array with c. Empty ones stay on
// one line, as with json.MarshalIndent.
func (w *Writer) end(c byte) {
	depth := len(w.open)
	if depth > 0 {
		if w.open[depth-1] > 0 {
			w.newline(depth - 1)
		}
		w.open = w.open[:depth-1]
	}
	w.buf = append(w.buf, c)
}

func (w *Writer) newline(depth int) {
	if w.indent == "" {
		return
	}
	w.buf = append(w.buf, '\n')
	for range depth {
		w.buf = append(w.buf, w.indent...)
	}
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as encoding/json does
// with HTML escaping off: quotes, backslashes, control characters, U+2028
// and U+2029 are escaped, and invalid UTF-8 becomes U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			dst = appendEscapedByte(dst, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscapedByte escapes an ASCII quote, backslash or control byte.
func appendEscapedByte(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}

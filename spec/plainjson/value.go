package plainjson

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the kind of a JSON value. The zero Kind is null, so that the
// zero Value reads as null: an absent document.
type Kind uint8

// The kinds of JSON value.
const (
	KindNull Kind = iota
	KindFalse
	KindTrue
	KindNumber
	KindString
	KindArray
	KindObject
)

// Value is one JSON value in a document Parse has checked: its kind and
// its text. Members, Elements and String walk the text without checking
// it again, so a Value is only ever made by Parse and by them.
type Value struct {
	Kind Kind
	Raw  string
}

// errNotJSON is Parse's error for anything that is not one JSON value.
var errNotJSON = errors.New("not valid JSON")

// Parse checks that data is one valid JSON document (RFC 8259), nested at
// most MaxDepth deep, and returns it. Strings are not checked for valid
// UTF-8: String passes what is not as it is, and Writer writes it as
// U+FFFD.
func Parse(data []byte) (Value, error) {
	s := string(data)
	start := skipSpace(s, 0)
	end, err := scanValue(s, start, 0)
	if err != nil {
		return Value{}, err
	}
	if skipSpace(s, end) != len(s) {
		return Value{}, errNotJSON
	}
	return Value{Kind: kindAt(s, start), Raw: s[start:end]}, nil
}

// IsObject reports whether v is an object.
func (v Value) IsObject() bool { return v.Kind == KindObject }

// IsArray reports whether v is an array.
func (v Value) IsArray() bool { return v.Kind == KindArray }

// String returns a string's text, unescaped, and any other value's JSON
// text.
func (v Value) String() string {
	if v.Kind != KindString {
		return v.Raw
	}
	return unescape(v.Raw[1 : len(v.Raw)-1])
}

// Members calls fn with each member of object v in order, a name that
// appears twice included, until fn returns false. It does nothing for
// other kinds.
func (v Value) Members(fn func(name string, val Value) bool) {
	if v.Kind != KindObject {
		return
	}
	s := v.Raw
	for i := skipSpace(s, 1); s[i] != '}'; {
		keyEnd := skipString(s, i)
		name := unescape(s[i+1 : keyEnd-1])
		i = skipSpace(s, skipSpace(s, keyEnd)+1) // past the colon
		end := skipValue(s, i)
		if !fn(name, Value{Kind: kindAt(s, i), Raw: s[i:end]}) {
			return
		}
		if i = skipSpace(s, end); s[i] == ',' {
			i = skipSpace(s, i+1)
		}
	}
}

// Elements calls fn with each element of array v in order until fn
// returns false. It does nothing for other kinds.
func (v Value) Elements(fn func(val Value) bool) {
	if v.Kind != KindArray {
		return
	}
	s := v.Raw
	for i := skipSpace(s, 1); s[i] != ']'; {
		end := skipValue(s, i)
		if !fn(Value{Kind: kindAt(s, i), Raw: s[i:end]}) {
			return
		}
		if i = skipSpace(s, end); s[i] == ',' {
			i = skipSpace(s, i+1)
		}
	}
}

// kindAt is the kind of the checked value that starts at s[i].
func kindAt(s string, i int) Kind {
	switch s[i] {
	case '{':
		return KindObject
	case '[':
		return KindArray
	case '"':
		return KindString
	case 't':
		return KindTrue
	case 'f':
		return KindFalse
	case 'n':
		return KindNull
	}
	return KindNumber
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the checked string that starts at s[i].
func skipString(s string, i int) int {
	for i++; s[i] != '"'; i++ {
		if s[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the end of the checked value that starts at s[i].
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch s[i] {
			case '"':
				i = skipString(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
		i++
	}
	return i
}

// unescape returns the text of a checked string's contents: escapes
// decoded, a \u escape of half a surrogate pair joined with the \u escape
// after it (U+FFFD where the two make no pair), and bytes that are not
// UTF-8 kept as they are.
func unescape(s string) string {
	i := 0
	for i < len(s) && s[i] != '\\' {
		i++
	}
	if i == len(s) {
		return s
	}
	out := make([]byte, i, len(s))
	copy(out, s)
	for i < len(s) {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if s[i+1] != 'u' {
			out = append(out, unescapeByte(s[i+1]))
			i += 2
			continue
		}
		r := hexRune(s[i+2 : i+6])
		i += 6
		if utf16.IsSurrogate(r) && i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
			r = utf16.DecodeRune(r, hexRune(s[i+2:i+6]))
			i += 6
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

func unescapeByte(c byte) byte {
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c // '"', '\\' or '/'
}

func hexRune(h string) rune {
	var r rune
	for i := range len(h) {
		r = r<<4 | rune(hexValue(h[i]))
	}
	return r
}

func hexValue(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 0xff
}

// tooDeep is scanValue's error past MaxDepth.
type tooDeep struct{}

func (tooDeep) Error() string { return fmt.Sprintf("not valid JSON: nested deeper than %d", MaxDepth) }

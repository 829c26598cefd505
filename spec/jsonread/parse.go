package jsonread

import (
	"errors"
	"fmt"

	"github.com/tidwall/gjson"
)

// MaxDepth is how deeply arrays and objects may nest in a document Parse
// accepts (SPEC.md, "Limits"). The project's documents nest six deep at
// most.
const MaxDepth = 64

// ErrNotJSON is wrapped by Parse's errors: the data is not one JSON
// document, or nests deeper than MaxDepth.
var ErrNotJSON = errors.New("not valid JSON")

// Parse checks that data is one valid JSON document (RFC 8259) nested at
// most MaxDepth deep, and returns it. Strings are not checked for valid
// UTF-8, as gjson does not.
func Parse(data []byte) (gjson.Result, error) {
	// The depth first: gjson.Valid recurses once per level, so that a
	// megabyte of "[" would take hundreds of megabytes of stack.
	if tooDeep(data) {
		return gjson.Result{}, fmt.Errorf("%w: nested deeper than %d", ErrNotJSON, MaxDepth)
	}
	if !gjson.ValidBytes(data) {
		return gjson.Result{}, ErrNotJSON
	}
	return gjson.ParseBytes(data), nil
}

// tooDeep reports whether brackets outside strings open more than
// MaxDepth deep anywhere in data. It looks at nothing else: what it
// passes, gjson.Valid checks, recursing no deeper than the brackets
// counted here.
func tooDeep(data []byte) bool {
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
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

package jsonread

import (
	"strconv"
	"strings"
)

// PathError is a reader error with where in the document it arose: a
// path of member names and list indexes, such as groups[1].paths, so that
// a message points at the value to fix.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns the error without its path.
func (e *PathError) Unwrap() error { return e.Err }

// At returns err as arising in the member named name: a PathError whose
// path starts with name. Checks of values already read use it too, so
// that their errors name the value the way the reader's do.
func At(name string, err error) error { return at(name, err) }

// AtIndex returns err as arising in element i of a list.
func AtIndex(i int, err error) error { return at("["+strconv.Itoa(i)+"]", err) }

func at(step string, err error) error {
	// Only a path at the top is extended: one wrapped inside another
	// error belongs to that error's message.
	pe, ok := err.(*PathError)
	if !ok {
		return &PathError{Path: step, Err: err}
	}
	if strings.HasPrefix(pe.Path, "[") {
		return &PathError{Path: step + pe.Path, Err: pe.Err}
	}
	return &PathError{Path: step + "." + pe.Path, Err: pe.Err}
}

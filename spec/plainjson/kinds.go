package plainjson

import (
	"time"
)

// value is a member's value of one kind: how it is written, read, and
// judged empty for omitempty. Every kind holds one pointer and nothing
// else, so that a Member holds it without allocating.
type value interface {
	write(w *Writer)
	read(r *reader, v Value, o readOptions) error
	empty() bool
}

type stringValue struct{ p *string }

func (k stringValue) write(w *Writer) { w.String(*k.p) }
func (k stringValue) read(_ *reader, v Value, o readOptions) error {
	return readNullable(k.p, v, o, readString)
}
func (k stringValue) empty() bool { return *k.p == "" }

type intValue struct{ p *int }

func (k intValue) write(w *Writer) { w.Int(*k.p) }
func (k intValue) read(_ *reader, v Value, o readOptions) error {
	return readNullable(k.p, v, o, readInt)
}
func (k intValue) empty() bool { return *k.p == 0 }

type boolValue struct{ p *bool }

func (k boolValue) write(w *Writer) { w.Bool(*k.p) }
func (k boolValue) read(_ *reader, v Value, o readOptions) error {
	return readNullable(k.p, v, o, readBool)
}
func (k boolValue) empty() bool { return !*k.p }

type intPtrValue struct{ p **int }

func (k intPtrValue) write(w *Writer) {
	if *k.p == nil {
		w.Null()
		return
	}
	w.Int(**k.p)
}
func (k intPtrValue) read(_ *reader, v Value, o readOptions) error { return readIntPtr(k.p, v) }
func (k intPtrValue) empty() bool                                  { return *k.p == nil }

type stringsValue struct{ p *[]string }

func (k stringsValue) write(w *Writer) { w.Strings(*k.p) }
func (k stringsValue) read(_ *reader, v Value, o readOptions) error {
	return readList(k.p, v, readString)
}
func (k stringsValue) empty() bool { return len(*k.p) == 0 }

type intsValue struct{ p *[]int }

func (k intsValue) write(w *Writer) { w.Ints(*k.p) }
func (k intsValue) read(_ *reader, v Value, o readOptions) error {
	return readList(k.p, v, readInt)
}
func (k intsValue) empty() bool { return len(*k.p) == 0 }

type stringMapValue struct{ p *map[string]string }

func (k stringMapValue) write(w *Writer) { w.StringMap(*k.p) }
func (k stringMapValue) read(_ *reader, v Value, o readOptions) error {
	return readStringMap(k.p, v)
}
func (k stringMapValue) empty() bool { return len(*k.p) == 0 }

// timeValue is written as time.Time's MarshalJSON writes it; it is a
// struct to encoding/json, so never empty.
type timeValue struct{ p *time.Time }

func (k timeValue) write(w *Writer) { w.String(k.p.Format(time.RFC3339Nano)) }
func (k timeValue) read(_ *reader, v Value, o readOptions) error {
	return readNullable(k.p, v, o, readTime)
}
func (k timeValue) empty() bool { return false }

// rawValue is written back as the text it was read as, null when there
// is none.
type rawValue struct{ p *[]byte }

func (k rawValue) write(w *Writer) {
	if len(*k.p) == 0 {
		w.Null()
		return
	}
	w.value()
	w.buf = append(w.buf, *k.p...)
}
func (k rawValue) read(_ *reader, v Value, o readOptions) error {
	*k.p = []byte(v.Raw)
	return nil
}
func (k rawValue) empty() bool { return len(*k.p) == 0 }

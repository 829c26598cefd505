package plainjson

import (
	"fmt"
	"time"
)

// Described is a Go value whose JSON object a table of members describes.
// The table is the one description of the type that both Writer.Object
// and Read follow, so that writing and reading cannot disagree; the
// type's json tags say the same for encoding/json, and each type's tests
// compare the two.
type Described interface {
	// AppendMembers appends the object's members to ms, in the order they
	// are written, each pointing into the value it is called on, and
	// returns the extended slice. Appending to the caller's slice, not
	// returning a new one, lets Writer and Read keep one stack of tables
	// for a whole document instead of allocating one per object.
	AppendMembers(ms []Member) []Member
}

// Table is a table made on the spot, for an object whose members are
// known only at run time.
type Table []Member

// AppendMembers appends t to ms.
func (t Table) AppendMembers(ms []Member) []Member { return append(ms, t...) }

// Member is one member of an object: its name, where its value lives and,
// through the constructor chosen, what JSON value it is. A Member holds a
// pointer, so a table is built for one value and used at once.
type Member struct {
	name      string
	omitEmpty bool
	strict    bool
	notNull   bool
	// value is where the member's value lives, as one of the kinds in
	// kinds.go, which know how to write, read and judge it empty.
	value value
}

// Name returns m's name.
func (m Member) Name() string { return m.name }

// OmitEmpty returns m left out by Writer.Object when its value is empty
// ("", 0, false, nil, or no elements), as a json tag's omitempty.
func (m Member) OmitEmpty() Member {
	m.omitEmpty = true
	return m
}

// Strict returns m read as ReadStrict reads, whatever the read of the
// object holding it: for a configuration whose top level is shared, and
// so lenient, but whose own objects should refuse misspelt keys.
func (m Member) Strict() Member {
	m.strict = true
	return m
}

// NotNull returns m refusing null, as a value of the wrong kind, where a
// string, integer, boolean or time would otherwise read null as absent:
// for a setting that, once given, must say something.
func (m Member) NotNull() Member {
	m.notNull = true
	return m
}

// The constructors below name a member and the Go value behind it. On
// reading, null leaves a string, integer, boolean, time or object as it
// was and sets a pointer, list or map to nil; [] and {} read as empty,
// not nil. Elements of lists and maps are never null. On writing, a nil
// list or map is null, as with encoding/json.

// String is a string member.
func String(name string, dst *string) Member { return Member{name: name, value: stringValue{dst}} }

// Int is an integer member. As with encoding/json, 1.0 and 1e3 are not
// integers.
func Int(name string, dst *int) Member { return Member{name: name, value: intValue{dst}} }

// Bool is a true-or-false member.
func Bool(name string, dst *bool) Member { return Member{name: name, value: boolValue{dst}} }

// IntPtr is an optional integer member whose zero is a valid value: nil
// when absent or null.
func IntPtr(name string, dst **int) Member { return Member{name: name, value: intPtrValue{dst}} }

// Strings is a list of strings.
func Strings(name string, dst *[]string) Member { return Member{name: name, value: stringsValue{dst}} }

// Ints is a list of integers.
func Ints(name string, dst *[]int) Member { return Member{name: name, value: intsValue{dst}} }

// StringMap is an object of strings, written in key order.
func StringMap(name string, dst *map[string]string) Member {
	return Member{name: name, value: stringMapValue{dst}}
}

// Time is a timestamp, written as time.Time's MarshalJSON writes it and
// read as RFC 3339.
func Time(name string, dst *time.Time) Member { return Member{name: name, value: timeValue{dst}} }

// Raw is a member kept as the JSON text it was read as, whatever it is;
// it is written back as that text, not indented.
func Raw(name string, dst *[]byte) Member { return Member{name: name, value: rawValue{dst}} }

// Object is a member that is itself an object described by a table.
func Object[T any, PT describedPtr[T]](name string, dst *T) Member {
	return Member{name: name, value: object[T, PT]{dst}}
}

// Objects is a list of objects described by a table.
func Objects[T any, PT describedPtr[T]](name string, dst *[]T) Member {
	return Member{name: name, value: objects[T, PT]{dst}}
}

// ObjectMap is an object of objects described by a table, by key, written
// in key order. A null value is kept as a nil entry, for the caller's
// checks to find; a key that appears twice is refused, since a map would
// keep only one of its values.
func ObjectMap[T any, PT describedPtr[T]](name string, dst *map[string]*T) Member {
	return Member{name: name, value: objectMap[T, PT]{dst}}
}

// describedPtr is *T where *T is Described: the constraint that lets
// Object and Objects make new elements to read into.
type describedPtr[T any] interface {
	*T
	Described
}

// Object writes d's members in table order, leaving out the empty ones
// marked OmitEmpty.
func (w *Writer) Object(d Described) {
	start := len(w.tables)
	w.tables = d.AppendMembers(w.tables)
	end := len(w.tables)
	w.BeginObject()
	for i := start; i < end; i++ {
		// By index, not range: a nested object appends its table to
		// w.tables, which may move it.
		m := w.tables[i]
		if m.omitEmpty && m.value.empty() {
			continue
		}
		w.Key(m.name)
		m.value.write(w)
	}
	w.EndObject()
	w.tables = w.tables[:start]
}

// Read reads object v into d, skipping members its table does not name,
// so that newer documents still load. null reads as an empty object.
// Errors name the member, and the element, they arose in.
func Read(v Value, d Described) error {
	r := reader{tables: newTables()}
	return r.object(v, d, false)
}

// ReadStrict is Read refusing, with ErrType, members the tables of d or of
// the objects inside it do not name, so that a misspelt key in a
// configuration is reported rather than ignored.
func ReadStrict(v Value, d Described) error {
	r := reader{tables: newTables()}
	return r.object(v, d, true)
}

// readOptions say how a member's value is read: strict, refusing
// members no table names, in it and in everything inside it; notNull,
// refusing null for the member itself.
type readOptions struct{ strict, notNull bool }

// newTables returns a stack for the tables of one document, large
// enough for the project's deepest (a state's allocation: 20 members in
// four tables), so that it is allocated once: every allocation of a new
// size is a fresh page for a plugin process to fault in.
func newTables() []Member { return make([]Member, 0, 24) }

// reader reads one document.
type reader struct {
	// tables holds the tables of the objects being read, the innermost
	// last, as Writer.tables does.
	tables []Member
}

// object reads object v into d.
func (r *reader) object(v Value, d Described, strict bool) error {
	if v.Kind == KindNull {
		return nil
	}
	if !v.IsObject() {
		return typeError(v, "an object")
	}
	start := len(r.tables)
	r.tables = d.AppendMembers(r.tables)
	end := len(r.tables)
	var err error
	v.Members(func(name string, val Value) bool {
		i := find(r.tables[start:end], name)
		switch {
		case i >= 0:
			m := r.tables[start+i]
			if e := m.value.read(r, val, readOptions{strict: strict || m.strict, notNull: m.notNull}); e != nil {
				err = At(name, e)
			}
		case strict:
			err = fmt.Errorf("unknown field %q: %w", name, ErrType)
		}
		return err == nil
	})
	r.tables = r.tables[:start]
	return err
}

// find returns the index of the member named name, or -1. Tables are
// short: a scan is cheaper than a map built for every object read.
func find(members []Member, name string) int {
	for i := range members {
		if members[i].name == name {
			return i
		}
	}
	return -1
}

package plainjson

import (
	"fmt"
)

// The kinds of member whose values are objects with tables of their own:
// object, objects (a list of them) and objectMap (an object of them by
// key). Each carries the nested type to write and read through and holds
// one pointer, so that a Member holding one allocates nothing more.
type object[T any, PT describedPtr[T]] struct{ dst *T }

type objects[T any, PT describedPtr[T]] struct{ dst *[]T }

type objectMap[T any, PT describedPtr[T]] struct{ dst *map[string]*T }

func (k object[T, PT]) write(w *Writer) { w.Object(PT(k.dst)) }

// empty is false: encoding/json never leaves a struct out.
func (k object[T, PT]) empty() bool { return false }

func (k object[T, PT]) read(r *reader, v Value, o readOptions) error {
	return r.object(v, PT(k.dst), o.strict)
}

func (k objects[T, PT]) write(w *Writer) {
	if *k.dst == nil {
		w.Null()
		return
	}
	w.BeginArray()
	for i := range *k.dst {
		w.Object(PT(&(*k.dst)[i]))
	}
	w.EndArray()
}

func (k objects[T, PT]) read(r *reader, v Value, o readOptions) error {
	return readList(k.dst, v, func(x *T, e Value) error {
		return r.object(e, PT(x), o.strict)
	})
}

func (k objects[T, PT]) empty() bool { return len(*k.dst) == 0 }

func (k objectMap[T, PT]) write(w *Writer) {
	if *k.dst == nil {
		w.Null()
		return
	}
	w.BeginObject()
	for _, key := range SortedKeys(*k.dst) {
		w.Key(key)
		if x := (*k.dst)[key]; x == nil {
			w.Null()
		} else {
			w.Object(PT(x))
		}
	}
	w.EndObject()
}

func (k objectMap[T, PT]) read(r *reader, v Value, o readOptions) error {
	if v.Kind == KindNull {
		*k.dst = nil
		return nil
	}
	if !v.IsObject() {
		return typeError(v, "an object")
	}
	if dup := repeatedKey(v); dup != "" {
		return fmt.Errorf("%q appears twice", dup)
	}
	out := make(map[string]*T)
	var err error
	v.Members(func(key string, e Value) bool {
		var x *T
		if e.Kind != KindNull {
			x = new(T)
			if err = r.object(e, PT(x), o.strict); err != nil {
				err = At(key, err)
			}
		}
		out[key] = x
		return err == nil
	})
	if err == nil {
		*k.dst = out
	}
	return err
}

func (k objectMap[T, PT]) empty() bool { return len(*k.dst) == 0 }

// repeatedKey returns the first key of object v that appears twice, or "".
func repeatedKey(v Value) string {
	var dup string
	seen := map[string]bool{}
	v.Members(func(name string, _ Value) bool {
		if seen[name] {
			dup = name
		}
		seen[name] = true
		return dup == ""
	})
	return dup
}

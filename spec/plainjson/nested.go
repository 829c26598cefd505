package plainjson

import (
	"fmt"

	"github.com/tidwall/gjson"
)

// The kinds of member whose values are objects with tables of their own:
// object, objects (a list of them) and objectMap (an object of them by
// key). Each carries the nested type to write and read through and holds
// one pointer, so that a Member holding one allocates nothing more.
type object[T any, PT describedPtr[T]] struct{ dst *T }

type objects[T any, PT describedPtr[T]] struct{ dst *[]T }

type objectMap[T any, PT describedPtr[T]] struct{ dst *map[string]*T }

func (o object[T, PT]) write(w *Writer) { w.Object(PT(o.dst)) }

// empty is false: encoding/json never leaves a struct out.
func (o object[T, PT]) empty() bool { return false }

func (o object[T, PT]) read(r *reader, v gjson.Result, strict bool) error {
	return r.object(v, PT(o.dst), strict)
}

func (o objects[T, PT]) write(w *Writer) {
	if *o.dst == nil {
		w.Null()
		return
	}
	w.BeginArray()
	for i := range *o.dst {
		w.Object(PT(&(*o.dst)[i]))
	}
	w.EndArray()
}

func (o objects[T, PT]) read(r *reader, v gjson.Result, strict bool) error {
	return readList(o.dst, v, func(x *T, e gjson.Result) error {
		return r.object(e, PT(x), strict)
	})
}

func (o objects[T, PT]) empty() bool { return len(*o.dst) == 0 }

func (o objectMap[T, PT]) write(w *Writer) {
	if *o.dst == nil {
		w.Null()
		return
	}
	w.BeginObject()
	for _, k := range SortedKeys(*o.dst) {
		w.Key(k)
		if x := (*o.dst)[k]; x == nil {
			w.Null()
		} else {
			w.Object(PT(x))
		}
	}
	w.EndObject()
}

func (o objectMap[T, PT]) read(r *reader, v gjson.Result, strict bool) error {
	if v.Type == gjson.Null {
		*o.dst = nil
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
	v.ForEach(func(k, e gjson.Result) bool {
		var x *T
		if e.Type != gjson.Null {
			x = new(T)
			if err = r.object(e, PT(x), strict); err != nil {
				err = At(k.String(), err)
			}
		}
		out[k.String()] = x
		return err == nil
	})
	if err == nil {
		*o.dst = out
	}
	return err
}

func (o objectMap[T, PT]) empty() bool { return len(*o.dst) == 0 }

// repeatedKey returns the first key of object v that appears twice, or "".
func repeatedKey(v gjson.Result) string {
	var dup string
	seen := map[string]bool{}
	v.ForEach(func(k, _ gjson.Result) bool {
		if seen[k.String()] {
			dup = k.String()
		}
		seen[k.String()] = true
		return dup == ""
	})
	return dup
}

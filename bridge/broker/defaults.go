package broker

import (
	"reflect"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// withServerDefaults is want with each integer field it leaves at zero
// taken from have, the object as the API server holds it: a Service
// port's targetPort and nodePort, a probe's period and thresholds. The
// API server fills those in, and equality.Semantic.DeepDerivative, which
// skips what want leaves unset, compares integers whatever they are: a
// made object would never match, and every look would write it back.
// Such a field is omitted from JSON when zero, so zero is "unset"; an
// integer behind a pointer (replicas) is a value the Broker set, and is
// compared as it is. want is changed in place.
func withServerDefaults(want, have any) {
	fillZeroInts(reflect.ValueOf(want), reflect.ValueOf(have))
}

// fillZeroInts walks want and have side by side and sets want's zero
// integer fields of structs to have's.
func fillZeroInts(want, have reflect.Value) {
	switch want.Kind() {
	case reflect.Pointer:
		// A pointer's IntOrString is a value the Broker set, as a
		// pointer's integer is (maxUnavailable 0).
		if !want.IsNil() && !have.IsNil() && want.Elem().Kind() == reflect.Struct &&
			want.Elem().Type() != reflect.TypeFor[intstr.IntOrString]() {
			fillZeroInts(want.Elem(), have.Elem())
		}
	case reflect.Slice:
		for i := range min(want.Len(), have.Len()) {
			fillZeroInts(want.Index(i), have.Index(i))
		}
	case reflect.Struct:
		for i := range want.NumField() {
			fillField(want.Field(i), have.Field(i))
		}
	}
}

// fillField sets a zero integer field to have's, and walks any other.
func fillField(want, have reflect.Value) {
	if !want.CanSet() {
		return // unexported: a Quantity's, a Time's insides
	}
	if want.Type() == reflect.TypeFor[intstr.IntOrString]() {
		// Taken whole or not at all: its Type says which value counts.
		if want.IsZero() {
			want.Set(have)
		}
		return
	}
	switch want.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if want.Int() == 0 {
			want.SetInt(have.Int())
		}
	default:
		fillZeroInts(want, have)
	}
}

package engine

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// part is an object arg of the test's.
type part struct {
	ID string `json:"id"`
}

// testArgs are one arg of every kind, with defaults, read by readTestArgs.
type testArgs struct {
	Name  string
	Count int
	Tags  []string
	One   part
	Parts []part
}

func readTestArgs(t *testing.T, args string) (testArgs, error) {
	t.Helper()
	cfg, err := spec.ParseConfig([]byte(`{"cdiVersion":"0.1.0","name":"t","type":"gpu","plugin":"test","args":` + args + `}`))
	if err != nil {
		t.Fatal(err)
	}
	a := testArgs{Name: "default", Count: 3}
	noEmptyID := func(ps []part) error {
		for i, p := range ps {
			if p.ID == "" {
				return jsonread.AtIndex(i, jsonread.At("id", errors.New("is empty")))
			}
		}
		return nil
	}
	err = ReadArgs(cfg,
		String("name", &a.Name, nil),
		Int("count", &a.Count, Between(1, 9)),
		Strings("tags", &a.Tags, nil),
		Object("one", &a.One, nil),
		Objects("parts", &a.Parts, noEmptyID),
	)
	return a, err
}

func TestReadArgs(t *testing.T) {
	for _, tt := range []struct {
		name, args string
		want       testArgs
	}{
		{"absent: the defaults", `{}`, testArgs{Name: "default", Count: 3}},
		{"args null", `null`, testArgs{Name: "default", Count: 3}},
		{"others' args are left alone", `{"root":"/r","other":[1]}`, testArgs{Name: "default", Count: 3}},
		{"null list and object are absent", `{"tags":null,"one":null,"parts":null}`, testArgs{Name: "default", Count: 3}},
		{"values", `{"name":"n","count":9,"tags":[],"one":{"id":"x"},"parts":[{"id":"a"}]}`,
			testArgs{Name: "n", Count: 9, Tags: []string{}, One: part{"x"}, Parts: []part{{"a"}}}},
		{"the last of a repeated arg counts", `{"count":1,"count":2}`, testArgs{Name: "default", Count: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readTestArgs(t, tt.args)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestReadArgsRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, args string
		details    string // the error's details, which must begin with them
		wantType   bool   // a value of the wrong kind: wraps jsonread.ErrType
	}{
		{"string null", `{"name":null}`, `args.name: wrong JSON type: want a string, got null`, true},
		{"number for a string", `{"name":5}`, `args.name: wrong JSON type: want a string`, true},
		{"integer null", `{"count":null}`, `args.count: wrong JSON type: want an integer, got null`, true},
		{"fraction", `{"count":2.0}`, `args.count: wrong JSON type: want an integer`, true},
		{"out of range", `{"count":10}`, `args.count: must be an integer from 1 to 9, not 10`, false},
		{"string for a list", `{"tags":"a"}`, `args.tags: wrong JSON type: want an array`, true},
		{"unknown member of an object", `{"one":{"id":"x","ID":"y"}}`, `args.one: unknown field "ID"`, true},
		{"unknown member of a listed object", `{"parts":[{"id":"a"},{"di":"b"}]}`, `args.parts[1]: unknown field "di"`, true},
		{"wrong kind deep inside", `{"parts":[{"id":7}]}`, `args.parts[0].id: wrong JSON type`, true},
		{"check of an element", `{"parts":[{"id":"a"},{}]}`, `args.parts[1].id: is empty`, false},
		{"object for a list", `{"parts":{}}`, `args.parts: wrong JSON type: want an array`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readTestArgs(t, tt.args)
			var e *spec.Error
			if !errors.As(err, &e) || e.Code != spec.CodeInvalidConfig || !strings.HasPrefix(e.Details, tt.details) {
				t.Fatalf("error %v, want code %d with details %s...", err, spec.CodeInvalidConfig, tt.details)
			}
			if errors.Is(err, jsonread.ErrType) != tt.wantType {
				t.Errorf("error %v: wraps jsonread.ErrType %v, want %v", err, !tt.wantType, tt.wantType)
			}
		})
	}
}

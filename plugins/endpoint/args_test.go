package main

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cdiexec/cdi/spec"
	"github.com/cdiexec/cdi/spec/jsonread"
)

// TestParseArgsRefuses checks that args.probe and args.endpoints are read
// strictly: unknown members and values of the wrong type are refused as
// invalid configuration while decoding (wrapping jsonread.ErrType), and
// values that decode but fail the checks are refused without it.
func TestParseArgsRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, args string
		wantType   bool // the error is a decoding error
	}{
		{"unknown member in probe", `{"probe":{"tcp":true,"timeout":5}}`, true},
		{"probe member names are case-sensitive", `{"probe":{"TCP":true}}`, true},
		{"probe as a bool", `{"probe":true}`, true},
		{"probe as a list", `{"probe":[]}`, true},
		{"probe as a string", `{"probe":"tcp"}`, true},
		{"tcp as a string", `{"probe":{"tcp":"true"}}`, true},
		{"tcp as a number", `{"probe":{"tcp":1}}`, true},
		{"timeoutMs as a string", `{"probe":{"tcp":true,"timeoutMs":"5"}}`, true},
		{"timeoutMs as a fraction", `{"probe":{"tcp":true,"timeoutMs":1.5}}`, true},
		{"timeoutMs with an exponent", `{"probe":{"tcp":true,"timeoutMs":1e3}}`, true},
		{"timeoutMs overflowing", `{"probe":{"tcp":true,"timeoutMs":99999999999999999999}}`, true},
		{"timeoutMs as a bool", `{"probe":{"timeoutMs":true}}`, true},
		{"timeoutMs out of range", `{"probe":{"tcp":true,"timeoutMs":0}}`, false},
		{"unknown member in an endpoint", `{"endpoints":[{"id":"a","url":"rtsp://h","port":1}]}`, true},
		{"unknown member in a later endpoint", `{"endpoints":[{"id":"a","url":"rtsp://h"},{"id":"b","url":"rtsp://g","labels":{}}]}`, true},
		{"endpoint member names are case-sensitive", `{"endpoints":[{"ID":"a","url":"rtsp://h"}]}`, true},
		{"env value a number", `{"endpoints":[{"id":"a","url":"rtsp://h","env":{"X":1}}]}`, true},
		{"env value null", `{"endpoints":[{"id":"a","url":"rtsp://h","env":{"X":null}}]}`, true},
		{"env as a list", `{"endpoints":[{"id":"a","url":"rtsp://h","env":["X=1"]}]}`, true},
		{"properties value a bool", `{"endpoints":[{"id":"a","url":"rtsp://h","properties":{"k":true}}]}`, true},
		{"properties as a string", `{"endpoints":[{"id":"a","url":"rtsp://h","properties":"k=v"}]}`, true},
		{"id as a number", `{"endpoints":[{"id":1,"url":"rtsp://h"}]}`, true},
		{"url as an object", `{"endpoints":[{"id":"a","url":{"host":"h"}}]}`, true},
		{"endpoint as a number", `{"endpoints":[5]}`, true},
		{"endpoint as a string", `{"endpoints":["rtsp://h"]}`, true},
		{"endpoints as an object", `{"endpoints":{}}`, true},
		{"endpoints as a string", `{"endpoints":"rtsp://h"}`, true},
		{"null endpoint", `{"endpoints":[null]}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := host(t, tt.args)
			_, err := parseArgs(h.Config)
			if spec.CodeOf(err) != spec.CodeInvalidConfig {
				t.Fatalf("error %v, want code %d", err, spec.CodeInvalidConfig)
			}
			if got := errors.Is(err, jsonread.ErrType); got != tt.wantType {
				t.Fatalf("error %v: wraps jsonread.ErrType %v, want %v", err, got, tt.wantType)
			}
		})
	}
}

// TestParseArgsReads checks the values read, nulls, and the defaults.
func TestParseArgsReads(t *testing.T) {
	type ep struct {
		ID, URL         string
		Env, Properties map[string]string
	}
	for _, tt := range []struct {
		name, args string
		probe      bool
		timeout    time.Duration
		endpoints  []ep
	}{
		{"nothing", `{}`, false, defaultTimeout, nil},
		{"nulls", `{"probe":null,"endpoints":null}`, false, defaultTimeout, nil},
		{"empty probe", `{"probe":{}}`, false, defaultTimeout, nil},
		{"null probe members", `{"probe":{"tcp":null,"timeoutMs":null}}`, false, defaultTimeout, nil},
		{"probe", `{"probe":{"tcp":true,"timeoutMs":1234}}`, true, 1234 * time.Millisecond, nil},
		{"later null timeoutMs wins", `{"probe":{"tcp":true,"timeoutMs":0,"timeoutMs":null}}`, true, defaultTimeout, nil},
		{"endpoints", `{"endpoints":[
			{"id":"a","url":"rtsp://h/s","env":{"CAMERA_CODEC":"h264"},"properties":{"site":"hq"}},
			{"id":"b","url":"http://g","env":null,"properties":null},
			{"id":"c","url":"http://f","env":{},"properties":{}}]}`, false, defaultTimeout, []ep{
			{"a", "rtsp://h/s", map[string]string{"CAMERA_CODEC": "h264"}, map[string]string{"site": "hq"}},
			{"b", "http://g", nil, nil},
			{"c", "http://f", map[string]string{}, map[string]string{}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := host(t, tt.args)
			a, err := parseArgs(h.Config)
			if err != nil {
				t.Fatal(err)
			}
			if a.probe != tt.probe || a.timeout != tt.timeout {
				t.Errorf("probe %v, timeout %v; want %v, %v", a.probe, a.timeout, tt.probe, tt.timeout)
			}
			var got []ep
			for _, e := range a.endpoints {
				got = append(got, ep{e.ID, e.URL, e.Env, e.Properties})
			}
			if !reflect.DeepEqual(got, tt.endpoints) {
				t.Errorf("endpoints %+v, want %+v", got, tt.endpoints)
			}
		})
	}
}

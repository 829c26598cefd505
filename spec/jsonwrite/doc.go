// Package jsonwrite writes the documents a plugin prints and stores, byte
// for byte as encoding/json writes them with HTML escaping off, following
// the same json tags.
//
// It exists for speed alone. A plugin is a short-lived process, and
// encoding/json builds an encoder for every type on its first use in a
// process: for the ADD result and the state file, which every ADD and DEL
// writes, that was the larger part of what encoding/json cost a call
// against the writer it replaced (the bench's figures are in the commit
// that added this package). Walking the value by reflection once, with
// no encoder built or cached, costs a fraction of that. It writes only
// what the wire types hold: strings, integers, booleans, pointers,
// slices, maps with string keys, structs by their json tags, and values
// that marshal themselves (time.Time, json.RawMessage, InfoResult).
// Everything else (callers that are not start-up bound: the bridge,
// cditool, tests) uses encoding/json, and this package's tests hold the
// two to the same bytes.
package jsonwrite

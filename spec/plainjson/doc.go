// Package plainjson reads and writes JSON without reflection.
//
// A plugin is a short-lived process: every call pays again for whatever
// its code does the first time, and encoding/json's first use in a process
// builds a codec per type by reflection, touching memory each call then
// pays for. The plugins therefore describe each document type once, as a
// table of members (Described: each member's name, kind, omitempty and
// where its value lives), and both directions follow that table:
// Writer.Object writes it, indented exactly as json.MarshalIndent would,
// and Read reads it from a Value, which Parse checks once and which is
// then walked without allocating a tree. The package needs nothing
// outside the standard library but fmt, strconv, time and unicode: no
// encoding/json, whose package init and size every plugin process would
// pay for.
//
// The wire types keep their json tags, so that callers that are not
// start-up bound (the bridge, tests) may keep using encoding/json; the
// types' tests check that both ways agree.
package plainjson

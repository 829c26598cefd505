// Package plainjson reads and writes JSON without reflection.
//
// A plugin is a short-lived process: every call pays for its start-up, and
// encoding/json's first use in a process (building a codec per type by
// reflection, and the memory that touches) costs about as much as the
// plugin's own work. The plugins therefore write their documents with a
// Writer, which appends to a byte slice and indents exactly as
// json.MarshalIndent does, and read them with the strict field readers
// here over gjson, which parses without reflection.
//
// The wire types keep their json tags, so that callers that are not
// start-up bound (the bridge, tests) may keep using encoding/json; the
// types' tests check that both ways agree.
package plainjson

// Package jsonread reads JSON documents with gjson into Go values, following
// their json tags: a wire type's struct and its tags are its one
// description, for reading here as for writing (encoding/json, or
// package jsonwrite where a plugin writes).
//
// It reads what encoding/json would read, with the differences the
// protocol needs: member names match exactly (encoding/json also takes
// "Type" for "type"), a map refuses a key given twice (it would keep one
// of the values, and in a state file free the slots of the other),
// ReadStrict refuses members no field names, and Parse refuses a document
// nested deeper than MaxDepth before gjson, whose checker recurses once
// per level, ever sees it.
//
// gjson rather than encoding/json's decoder: a plugin is a short-lived
// process, and gjson walks the document's text without building a
// decoder per type first.
package jsonread

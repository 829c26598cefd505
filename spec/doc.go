// Package spec holds the wire types and rules of the CDI exec protocol that
// callers and plugins share: protocol versions and their negotiation,
// configuration decoding, parsing of CDI_REQUEST and the other request
// parameters per the ABNF in SPEC.md, command results, and the error type
// with its well-known codes.
//
// Documents are read with gjson (package jsonread) and written as
// encoding/json writes them (package jsonwrite, on the plugins' side),
// each wire type described once, by its struct's json tags. The package has no other dependencies outside the standard
// library, so that plugin binaries which import it stay small and start
// fast.
package spec

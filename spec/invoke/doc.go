// Package invoke is the caller side of the CDI exec protocol: it loads the
// drop-in configurations under /etc/cdi/<type>.d, finds each one's plugin
// binary in a search path, runs it with the protocol's environment and the
// drop-in on stdin, and decodes the one JSON document it prints.
//
// A Plugin value wraps one drop-in and offers one typed method per command
// (Version, Info, Add, Del, List, GC). It negotiates CDI_VERSION with the
// plugin once, from the plugin's VERSION reply, and checks that every result
// is written in the version it asked for. A VersionCache keeps that reply
// for all the Plugins of one binary until the file at its path changes, so
// that a caller that makes Plugins afresh runs VERSION once per binary, and
// a plugin upgraded on the host is asked again. A plugin that refuses the
// negotiated version (code 1) is asked again too, and the call retried once.
//
// Errors come in two kinds. A plugin that printed an error document yields
// that document as a *spec.Error, so callers use errors.As or spec.CodeOf
// on it. A plugin that could not be run or misbehaved yields an error that
// wraps one of the sentinels ErrNotFound, ErrExec, ErrTimeout, ErrBadOutput
// or ErrIncompatible, with the plugin's stderr in the message. Invalid
// arguments given to a method wrap spec.ErrMalformed and are reported before
// anything is run.
//
// Processes are run by an Exec. ProcessExec is the real one; the sibling
// package fakeexec answers from a table, for unit tests of callers.
package invoke

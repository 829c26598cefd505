// Package skel is the plugin side of the CDI exec protocol: it reads the
// environment and the configuration on stdin, checks them, dispatches to the
// plugin's callback for the command, and writes exactly one JSON document on
// stdout with the exit status SPEC.md prescribes.
//
// A plugin's main is one call:
//
//	func main() { skel.Main(skel.Plugin{Info: info, Add: add, Del: del}) }
//
// A nil callback means the plugin does not implement that command, which
// the caller sees as error code 3.
package skel

// Package engine is the allocation logic every plugin shares. A plugin
// supplies a Family, which only discovers devices; the engine turns it into
// skel callbacks that keep usage slots in the plugin's locked state and
// implement INFO, ADD, DEL, LIST and GC with the semantics of SPEC.md:
// capacity slots per device, all-or-nothing ADD, idempotent repeated ADD,
// pinned devices, NUMA preference, the 0.1.0 inventory and GC.
package engine

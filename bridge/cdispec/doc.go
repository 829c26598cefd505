// Package cdispec writes the CNCF Container Device Interface spec files
// through which a container runtime resolves the CDI device names the
// bridge returns at Allocate.
//
// The kubelet hands every CDI name in an Allocate response to the runtime,
// and a runtime with CDI on (containerd 2, CRI-O) fails the container on a
// name that no spec file in its spec directories defines. So the bridge
// names a device only once a spec file holding it is on disk, and keeps
// the files in step with discovery.
//
// A spec file holds what a device is, not how it was allocated: the
// device nodes of each device (host path, container path, the plugin's
// cgroup permissions). What one allocation adds (environment, mounts,
// annotations, joined across the devices of one container) stays in the
// Allocate response. A device with no device node has no edits a spec
// could hold, so it has no CDI name: its container gets it through the
// response alone.
//
// Files are written and checked with the CNCF library
// (tags.cncf.io/container-device-interface), the one the runtimes read
// them with: its spec types, its validator and its atomic writer. That
// writer leaves its temporary file behind when a write fails (a full
// disk), so each write runs in a staging directory of its own inside the
// spec directory, which goes after the write whatever it holds; Open
// removes those a killed process left. The files this package owns carry
// a name prefix of their own, so that a directory shared with other CDI
// producers is never swept of theirs.
package cdispec

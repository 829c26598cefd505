// Package report is what the node test's workload (podcheck) writes about
// the container it runs in, and the node test reads.
package report

// FileName is the report's name in the directory podcheck is given.
const FileName = "report.json"

// Report is what the container sees of its devices.
type Report struct {
	// Devices are the device nodes under /dev, but for those the runtime
	// gives every container.
	Devices []Device `json:"devices"`
	// Env is the whole environment.
	Env map[string]string `json:"env"`
}

// Device is a device node.
type Device struct {
	Path  string `json:"path"`
	Type  string `json:"type"` // "c" (character) or "b" (block)
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

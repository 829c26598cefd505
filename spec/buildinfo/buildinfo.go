// Package buildinfo says which build of the project a binary is, from
// what the go tool stamps into it: the module's version where the binary
// was built from a tagged module (go install ...@v1.2.3), else the VCS
// revision of the checkout it was built in, with "-dirty" for uncommitted
// changes, else "devel".
package buildinfo

import "runtime/debug"

// Version is this binary's build, e.g. "v0.3.0", "c6eb6f6a1b2c" or
// "c6eb6f6a1b2c-dirty".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return version(bi)
}

// Of is the version of the binary whose build information bi is (read,
// say, with debug/buildinfo.ReadFile from a binary built for another
// machine), by Version's rule.
func Of(bi *debug.BuildInfo) string { return version(bi) }

func version(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return rev + dirty
}

package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"tagged module", debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "c6eb6f6a1b2c3d4e5f60718293a4b5c6d7e8f901"}, {Key: "vcs.modified", Value: "false"}}}, "c6eb6f6a1b2c"},
		{"uncommitted changes", debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "c6eb6f6a1b2c3d4e"}, {Key: "vcs.modified", Value: "true"}}}, "c6eb6f6a1b2c-dirty"},
		{"nothing stamped", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(&tc.bi); got != tc.want {
				t.Errorf("Of = %q, want %q", got, tc.want)
			}
		})
	}
	if Version() == "" {
		t.Error("Version of the test binary is empty")
	}
}

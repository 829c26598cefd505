package main

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	there := prereq{"a", func() bool { return true }, "tests A", "pkg-a"}
	gone := prereq{"b", func() bool { return false }, "tests B", "pkg-b"}
	for _, tc := range []struct {
		name     string
		list     []prereq
		ci, root bool
		status   int
		say      []string
	}{
		{"all there", []prereq{there}, true, true, 0, []string{"all there"}},
		{"missing, not CI", []prereq{there, gone}, false, true, 0, []string{"missing b, needed by tests B (Debian: apt-get install pkg-b)", "will skip"}},
		{"missing under CI", []prereq{gone}, true, true, 1, []string{"missing b", "would fail: apt-get install pkg-b"}},
		{"not root", []prereq{there}, false, false, 0, []string{"not root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if got := check(&out, tc.list, tc.ci, tc.root); got != tc.status {
				t.Errorf("status %d, want %d", got, tc.status)
			}
			for _, s := range tc.say {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
		})
	}
}

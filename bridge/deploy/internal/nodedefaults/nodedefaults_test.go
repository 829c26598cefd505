package nodedefaults

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, list string
		want       []string
		err        error
	}{
		{"names sorted, comments and blanks skipped", "# c\n\ngpu.d/drm.conf\n  dev.d/generic.conf  \n", []string{"dev.d/generic.conf", "gpu.d/drm.conf"}, nil},
		{"empty", "# nothing\n", nil, nil},
		{"twice", "gpu.d/drm.conf\ngpu.d/drm.conf\n", nil, ErrBadName},
		{"no type directory", "drm.conf\n", nil, ErrBadName},
		{"not a drop-in", "gpu.d/drm.json\n", nil, ErrBadName},
		{"out of conf.d", "../gpu.d/drm.conf\n", nil, ErrBadName},
		{"nested", "gpu.d/x/drm.conf\n", nil, ErrBadName},
		{"a comment after a name", "gpu.d/drm.conf # the GPUs\n", nil, ErrBadName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse([]byte(tc.list))
			if !errors.Is(err, tc.err) || !slices.Equal(got, tc.want) {
				t.Errorf("parse(%q) = %q, %v; want %q, %v", tc.list, got, err, tc.want, tc.err)
			}
		})
	}
}

// TestRepository: every drop-in the repository's list names is one of
// conf.d's.
func TestRepository(t *testing.T) {
	confD := "../../../../conf.d"
	names, err := Read(confD)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("%s names no drop-in", File)
	}
	for _, n := range names {
		if fi, err := os.Lstat(filepath.Join(confD, n)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s names %s, which conf.d has not as a file (%v)", File, n, err)
		}
	}
}

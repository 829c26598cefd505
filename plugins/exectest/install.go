package exectest

import (
	"os"
	"path/filepath"
	"testing"
)

// Install copies the binary src into dir, under its own name, as an
// installer does: written beside, then renamed into place, so that a
// binary already there is replaced by a new file (another inode), never
// rewritten. It returns the installed path.
func Install(t testing.TB, src, dir string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(src))
	tmp := filepath.Join(dir, "."+filepath.Base(src)+".new")
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

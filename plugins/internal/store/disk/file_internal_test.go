package disk

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteAtomicFailure checks that a failed save names the file, keeps
// the old content and leaves no temporary file behind.
func TestWriteAtomicFailure(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		// Creating the temporary file fails.
		{"no directory", func(t *testing.T, path string) {
			if err := os.Remove(filepath.Dir(path)); err != nil {
				t.Fatal(err)
			}
		}},
		// The rename fails: a non-empty directory cannot be replaced.
		{"path is a directory", func(t *testing.T, path string) {
			if err := os.MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "p.json")
			tt.setup(t, path)
			err := writeAtomic(path, []byte("{}\n"), true)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("writeAtomic = %v, want an error naming %s", err, path)
			}
			if _, err := os.Stat(path + tempSuffix); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("temporary file left: stat = %v", err)
			}
		})
	}
}

package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tempInfix separates the state file's name from the random suffix of its
// temporary files: <base>.tmp-<random>.
const tempInfix = ".tmp-"

// mkdirAll creates dir and its parents.
func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	return nil
}

// removeStaleTemps removes temporary files a crashed save left next to
// path. The caller holds the lock, so no save is in progress.
func removeStaleTemps(path string) error {
	dir, prefix := filepath.Dir(path), filepath.Base(path)+tempInfix
	// ReadDir rather than Glob: the file name may hold glob metacharacters.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list state directory: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		err := os.Remove(filepath.Join(dir, e.Name()))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale temporary state file: %w", err)
		}
	}
	return nil
}

// writeAtomic replaces the file at path with data such that a crash at any
// instant leaves either the old or the new content under path.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := writeTemp(dir, filepath.Base(path)+tempInfix+"*", data)
	if err != nil {
		return fmt.Errorf("save state file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("save state file %s: %w", path, err)
	}
	// Without this the rename itself may be lost on power failure, and the
	// old state come back after the new one was acted upon.
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("save state file %s: %w", path, err)
	}
	return nil
}

// writeTemp writes data to a new file in dir, syncs and closes it, and
// returns its name. On failure it removes the file.
func writeTemp(dir, pattern string, data []byte) (name string, err error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	// CreateTemp makes the file 0600; Chmod is not subject to the umask.
	if err := f.Chmod(fileMode); err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		return "", err
	}
	// The data must be on disk before the rename makes it the state, or a
	// crash could leave an empty or partial file under the state's name.
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// syncDir flushes dir's entries, making a rename into it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

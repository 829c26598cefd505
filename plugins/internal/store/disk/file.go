package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// tempSuffix names the one temporary file a save writes before renaming
// it over the state file: <path>.tmp. One name is enough, since saves hold
// the exclusive lock and so are never two at once; a fixed name also
// spares every call a directory listing to find what a crashed save left.
const tempSuffix = ".tmp"

// mkdirAll creates dir and its parents.
func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	return nil
}

// removeStaleTemp removes the temporary file a crashed save left next to
// path, if any. The caller holds the lock, so no save is in progress.
func removeStaleTemp(path string) error {
	err := os.Remove(path + tempSuffix)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale temporary state file: %w", err)
	}
	return nil
}

// writeAtomic replaces the file at path with data such that a crash at any
// instant leaves either the old or the new content under path. With
// durable set, the rename is synced too, so that the new content is what
// survives a power failure.
func writeAtomic(path string, data []byte, durable bool) error {
	dir := filepath.Dir(path)
	tmp := path + tempSuffix
	if err := writeTemp(tmp, data); err != nil {
		return fmt.Errorf("save state file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("save state file %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("save state file %s: %w", path, err)
	}
	return nil
}

// writeTemp writes data to the file name, replacing what a crashed save
// may have left there, and syncs and closes it. On failure it removes it.
func writeTemp(name string, data []byte) (err error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fileMode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(name)
		}
	}()
	// The umask may have narrowed the mode; Chmod is not subject to it.
	if err := f.Chmod(fileMode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	// The data must be on disk before the rename makes it the state, or a
	// crash could leave an empty or partial file under the state's name.
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
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

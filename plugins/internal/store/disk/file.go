package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// tempSuffix names the one temporary file a save writes before renaming
// it over the state file: <path>.tmp. One name is enough, since saves hold
// the exclusive lock and so are never two at once; a fixed name also
// spares every call a directory listing to find what a crashed save left.
// It is created exclusively and never through a link (writeTemp), so a
// file or link placed there beforehand fails the save and is never
// written; checkDir keeps anyone but the owner from placing one.
const tempSuffix = ".tmp"

// ErrUnsafeDir is wrapped by the error for a state directory that is a
// link, or that others than its owner may write to, or that another user
// owns: whoever can place files there can make a save write through a
// link.
var ErrUnsafeDir = errors.New("unsafe state directory")

// checkDir checks the directory the state, lock and temporary files live
// in.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	switch st, _ := fi.Sys().(*syscall.Stat_t); {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link", ErrUnsafeDir, dir)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s is writable by group or others (mode %v); chmod go-w it", ErrUnsafeDir, dir, fi.Mode().Perm())
	case st != nil && int(st.Uid) != os.Geteuid() && st.Uid != 0:
		return fmt.Errorf("%w: %s belongs to uid %d, neither this user nor root", ErrUnsafeDir, dir, st.Uid)
	}
	return nil
}

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

// writeTemp creates the file name, which must not exist (removeStaleTemp
// removed what a crashed save left), writes data to it, and syncs and
// closes it. On failure it removes it. O_EXCL with O_CREATE never follows
// a link: a link placed at name fails the call.
func writeTemp(name string, data []byte) (err error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
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

package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cdiexec/cdi/spec/atomicfile"
)

// tempSuffix names the one temporary file a save writes before renaming
// it over the state file: <path>.tmp. One name is enough, since saves hold
// the exclusive lock and so are never two at once; a fixed name also
// spares every call a directory listing to find what a crashed save left.
// It is created exclusively and never through a link (atomicfile), so a
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

// prepareDir creates dir and its parents where dir is missing, and checks
// it (checkDir). A directory that exists, every call but the first, costs
// one lstat.
func prepareDir(dir string) error {
	err := checkDir(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	return checkDir(dir)
}

// removeStaleTemp removes the temporary file a crashed save left next to
// path, if any. The caller holds the lock, so no save is in progress.
func removeStaleTemp(path string) error {
	// unlink alone: os.Remove would try rmdir as well after every unlink
	// that found nothing, which is every call but one after a crash.
	tmp := path + tempSuffix
	if err := syscall.Unlink(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale temporary state file: %w", &fs.PathError{Op: "unlink", Path: tmp, Err: err})
	}
	return nil
}

// writeAtomic replaces the file at path with data such that a crash at any
// instant leaves either the old or the new content under path. With
// durable set, the rename is synced too, so that the new content is what
// survives a power failure. The caller holds the lock and has removed a
// stale temporary file (removeStaleTemp).
func writeAtomic(path string, data []byte, durable bool) error {
	err := atomicfile.Write(path, data, atomicfile.Options{Perm: fileMode, Temp: filepath.Base(path) + tempSuffix, NoSyncDir: !durable})
	if err != nil {
		return fmt.Errorf("save state file: %w", err)
	}
	return nil
}

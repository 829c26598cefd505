// Package atomicfile replaces files whole: the one way this project writes
// a file that others read while it changes (a plugin's state, the bridge's
// local Instance store, what cdi-install puts on a host), so that a crash
// or a full disk at any instant leaves the old content or the new one,
// never a mix, and nothing is written through a link someone placed.
//
// The new content goes to a temporary file beside the target, created
// exclusively (O_EXCL, which never follows a link), with its mode set
// explicitly (the umask does not narrow it), written with every error
// checked, synced, and renamed over the target; the directory is synced
// after the rename unless the caller says it need not be. On any failure
// the temporary file is removed and the target is untouched.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Options say how Write writes. The zero value is a file of mode 0644
// under a random temporary name, the directory synced.
type Options struct {
	// Perm is the file's mode; 0 means 0644.
	Perm fs.FileMode
	// Temp is a fixed temporary name in the target's directory, for a
	// caller that holds a lock and wants a crash's leftover found without
	// a listing. It must not exist: the caller removes a stale one under
	// its lock. Empty: a random name made from Pattern.
	Temp string
	// Pattern is os.CreateTemp's pattern for a random temporary name;
	// empty means "<target>.tmp*". A dot-file pattern keeps the file
	// out of directory scans that skip dot-files.
	Pattern string
	// NoSyncDir skips syncing the directory after the rename, where losing
	// the rename to a power failure is harmless.
	NoSyncDir bool
}

// Write replaces the file at path with data.
func Write(path string, data []byte, o Options) error {
	dir := filepath.Dir(path)
	tmp, err := o.create(path, data)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if o.NoSyncDir {
		return nil
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (o Options) create(path string, data []byte) (string, error) {
	dir := filepath.Dir(path)
	if o.Temp != "" {
		return filepath.Join(dir, o.Temp), writeNew(filepath.Join(dir, o.Temp), data, o.perm())
	}
	pattern := o.Pattern
	if pattern == "" {
		pattern = filepath.Base(path) + ".tmp*"
	}
	return CreateTemp(dir, pattern, data, o.perm())
}

func (o Options) perm() fs.FileMode {
	if o.Perm == 0 {
		return 0o644
	}
	return o.Perm
}

// CreateTemp writes data to a new file in dir named by pattern (as
// os.CreateTemp names it), with mode perm, synced and closed, and returns
// its path; on failure nothing is left. cdi-install links it into place
// where a rename would overwrite.
func CreateTemp(dir, pattern string, data []byte, perm fs.FileMode) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	return f.Name(), fill(f, data, perm)
}

// writeNew creates name exclusively, never through a link, and fills it.
// It opens a plain descriptor and wraps it with os.NewFile: os.OpenFile
// would bring the runtime's poller up, which a regular file never needs
// and a plugin's short call notices.
func writeNew(name string, data []byte, perm fs.FileMode) error {
	fd, err := syscall.Open(name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return fill(os.NewFile(uintptr(fd), name), data, perm)
}

// fill writes data to f, sets its mode, syncs and closes it; on failure it
// removes the file.
func fill(f *os.File, data []byte, perm fs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		// On disk before the rename makes it the file: else a crash could
		// leave an empty or partial file under the target's name.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// rename is os.Rename without its lstat of newpath, which it makes to
// refuse replacing a directory with its own error: rename(2) refuses
// that as well (EISDIR), and a plugin saves its state on most calls.
func rename(oldpath, newpath string) error {
	if err := syscall.Rename(oldpath, newpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
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

// ErrNotRegular is wrapped by ReadRegular's error for what is not a
// regular file (a FIFO, a device, a directory).
var ErrNotRegular = errors.New("not a regular file")

// errTooLarge is wrapped by ReadRegular's error for a file over its limit.
var errTooLarge = errors.New("file too large")

// ReadRegular reads the regular file at path, at most limit bytes: never
// through a link (the error wraps syscall.ELOOP) and never blocking on
// what is not a file, so that a FIFO placed at a path this project reads
// cannot stop it. A missing file's error wraps fs.ErrNotExist.
func ReadRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s: %w: more than %d bytes", path, errTooLarge, limit)
	}
	return data, err
}

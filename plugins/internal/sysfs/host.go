package sysfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// HostFS returns the tree at root (an absolute path) as one plugin call
// reads it. It behaves like os.DirFS(root), and it is cheaper where
// discovery spends its time, in system calls:
//   - Stat, Lstat, ReadLink and ReadDir are answered from memory after
//     the first call for a name, errors included. Resolving links visits
//     the same directories (sys, sys/devices, sys/devices/pci0000:00, ...)
//     for every device, fs.Glob lists /dev once per pattern, and a call
//     lasts milliseconds, too short for the tree to change in a way it
//     could act on.
//   - ReadString reads attributes with plain open, read and close. os.Open
//     also registers each descriptor with the runtime's poller and toggles
//     O_NONBLOCK, five system calls more per sysfs attribute.
//
// Like os.DirFS, it follows links wherever they lead, out of root too:
// what a plugin returns from under another root is checked with Inside.
//
// A HostFS is for one call: it never forgets what it has seen.
func HostFS(root string) fs.FS {
	// Sized for a discovery's lookups from the start: a map that grows
	// allocates every size on the way, each a fresh page for a short
	// process to fault in.
	return &hostFS{FS: os.DirFS(root), root: root, stat: make(map[string]infoResult, 64),
		lstat: make(map[string]infoResult, 64), links: make(map[string]linkResult, 32), dirs: make(map[string]dirResult, 8)}
}

type infoResult struct {
	fi  fs.FileInfo
	err error
}

type linkResult struct {
	target string
	err    error
}

type dirResult struct {
	entries []fs.DirEntry
	err     error
}

type hostFS struct {
	fs.FS // os.DirFS(root): Open, ReadFile, ReadDir
	root  string

	mu    sync.Mutex
	stat  map[string]infoResult
	lstat map[string]infoResult
	links map[string]linkResult
	dirs  map[string]dirResult
}

func (h *hostFS) Stat(name string) (fs.FileInfo, error) {
	r := remember(h, h.stat, name, func() (r infoResult) { r.fi, r.err = fs.Stat(h.FS, name); return r })
	return r.fi, r.err
}

func (h *hostFS) Lstat(name string) (fs.FileInfo, error) {
	r := remember(h, h.lstat, name, func() (r infoResult) { r.fi, r.err = fs.Lstat(h.FS, name); return r })
	return r.fi, r.err
}

func (h *hostFS) ReadLink(name string) (string, error) {
	r := remember(h, h.links, name, func() (r linkResult) { r.target, r.err = fs.ReadLink(h.FS, name); return r })
	return r.target, r.err
}

// ReadDir returns a copy of the remembered entries, so that a caller that
// sorts or trims its slice does not change what the next caller sees.
func (h *hostFS) ReadDir(name string) ([]fs.DirEntry, error) {
	r := remember(h, h.dirs, name, func() (r dirResult) { r.entries, r.err = h.readDir(name); return r })
	return slices.Clone(r.entries), r.err
}

// readDir is os.DirFS's ReadDir, entries sorted by name and errors naming
// name, but it opens the directory as readAttr opens an attribute and
// wraps the descriptor with os.NewFile: os.Open would bring the
// runtime's poller up for it.
func (h *hostFS) readDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	full := filepath.Join(h.root, filepath.FromSlash(name))
	fd, err := retryEINTR(func() (int, error) {
		return syscall.Open(full, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_DIRECTORY, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	dir := os.NewFile(uintptr(fd), full)
	defer dir.Close()
	entries, err := dir.ReadDir(-1)
	if pe, ok := err.(*fs.PathError); ok {
		pe.Path = name
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// remember returns memo[name], looking it up the first time it is asked.
// The lookup runs without h.mu held, so that no caller waits on
// another's system call; two callers asking for the same new name at once
// may both look it up.
func remember[R any](h *hostFS, memo map[string]R, name string, look func() R) R {
	h.mu.Lock()
	r, ok := memo[name]
	h.mu.Unlock()
	if ok {
		return r
	}
	r = look()
	h.mu.Lock()
	memo[name] = r
	h.mu.Unlock()
	return r
}

// readAttr reads at most limit bytes of name.
func (h *hostFS) readAttr(name string, limit int) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	data, op, err := readPlain(filepath.Join(h.root, filepath.FromSlash(name)), limit)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return data, nil
}

// ReadFile reads at most limit bytes of the file at path with plain open,
// read and close, as HostFS reads attributes: for the kernel's small
// files (/proc, /sys), which os.ReadFile would register with the runtime's
// poller, bringing it up, at a cost a short plugin call notices.
func ReadFile(path string, limit int) ([]byte, error) {
	data, op, err := readPlain(path, limit)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	return data, nil
}

// readPlain reads at most limit bytes of path; on failure it names the
// call that failed.
func readPlain(path string, limit int) (data []byte, op string, err error) {
	fd, err := retryEINTR(func() (int, error) { return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	if err != nil {
		return nil, "open", err
	}
	defer syscall.Close(fd)
	// Attributes are a few bytes, but the buffer may grow to limit: a
	// limit-sized buffer per read costs a fresh page for every attribute.
	buf := make([]byte, 0, min(limit, firstRead))
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), limit-len(buf)))
		}
		free := buf[len(buf):min(cap(buf), limit)]
		m, err := retryEINTR(func() (int, error) { return syscall.Read(fd, free) })
		if err != nil {
			return nil, "read", err
		}
		if m == 0 {
			break
		}
		buf = buf[:len(buf)+m]
	}
	return buf, "", nil
}

// firstRead is readAttr's first buffer: a uevent or a whole attribute of
// the kinds discovery reads fits in one read of it.
const firstRead = 512

// retryEINTR repeats a system call the runtime's own signals interrupted.
func retryEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if !errors.Is(err, syscall.EINTR) {
			return n, err
		}
	}
}

// attrReader is implemented by HostFS.
type attrReader interface {
	readAttr(name string, limit int) ([]byte, error)
}

var (
	_ fs.StatFS     = (*hostFS)(nil)
	_ fs.ReadLinkFS = (*hostFS)(nil)
	_ fs.ReadDirFS  = (*hostFS)(nil)
	_ attrReader    = (*hostFS)(nil)
)

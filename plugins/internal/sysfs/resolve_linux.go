package sysfs

import (
	"errors"
	"io/fs"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// kernelRoot is what resolving in the kernel needs of a HostFS's root:
// a descriptor of it, and its path as the kernel reports it.
type kernelRoot struct {
	fd   int
	path string // "" where the kernel cannot resolve for us
}

// openKernelRoot opens root for resolveInKernel. Its path is root with
// root's own links resolved, as /proc will name what is under it.
func openKernelRoot(root string) kernelRoot {
	fd, err := retryEINTR(func() (int, error) {
		return syscall.Open(root, unix.O_PATH|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	})
	if err != nil {
		return kernelRoot{fd: -1}
	}
	path, err := fdPath(fd)
	if err != nil {
		syscall.Close(fd)
		return kernelRoot{fd: -1}
	}
	return kernelRoot{fd: fd, path: path}
}

// fdPath is the path of an open descriptor, as /proc tells it.
func fdPath(fd int) (string, error) {
	// sysfs paths are shorter than 256 bytes: a bigger first buffer would
	// only deepen the call's stack, which Go grows by copying it.
	buf := make([]byte, 256)
	for {
		n, err := retryEINTR(func() (int, error) { return syscall.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf) })
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", syscall.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// resolveInKernel is Resolve done by the kernel: one openat2 with
// RESOLVE_IN_ROOT, which follows links as Resolve does (".." stops at
// the top, an absolute target starts again from it), and one readlink
// of the result's /proc/self/fd entry. Walking the links in user space
// costs an lstat per component and a readlink per link: resolving the
// device links of the fixture's ten DRM minors took the kernel less than
// half the walk's time (BenchmarkResolveClassEntries). It returns
// errNoKernelResolve where the kernel cannot (before Linux 5.6, openat2
// refused by a seccomp filter, no /proc) or answers ambiguously.
func (h *hostFS) resolveInKernel(name string) (string, error) {
	h.rootOnce.Do(func() {
		h.kroot = openKernelRoot(h.root)
		if h.kroot.fd >= 0 {
			runtime.AddCleanup(h, func(fd int) { syscall.Close(fd) }, h.kroot.fd)
		}
	})
	if h.kroot.path == "" {
		return "", errNoKernelResolve
	}
	fd, err := openInRoot(h.kroot.fd, name)
	switch {
	case errors.Is(err, syscall.ENOSYS), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.E2BIG), errors.Is(err, syscall.EAGAIN):
		// No openat2 or no RESOLVE_IN_ROOT, a seccomp filter, or renames
		// on the machine racing every try (EAGAIN): user space resolves.
		return "", errNoKernelResolve
	case errors.Is(err, syscall.ELOOP):
		return "", &fs.PathError{Op: "resolve", Path: name, Err: ErrLoop}
	case err != nil:
		return "", &fs.PathError{Op: "resolve", Path: name, Err: err}
	}
	defer syscall.Close(fd)
	full, err := fdPath(fd)
	if err != nil {
		return "", errNoKernelResolve
	}
	return nameUnder(h.kroot.path, full)
}

// openInRoot opens name under the root descriptor as a path only,
// following its links in root. The kernel refuses with EAGAIN a ".."
// walked while anything on the machine was renamed, which sysfs's
// relative links always walk: a few tries get past a busy moment.
func openInRoot(root int, name string) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for try := 1; ; try++ {
		fd, err := retryEINTR(func() (int, error) { return unix.Openat2(root, name, how) })
		if !errors.Is(err, syscall.EAGAIN) || try == openTries {
			return fd, err
		}
	}
}

// openTries bounds openInRoot's tries.
const openTries = 3

// nameUnder is full as a name under root, or errNoKernelResolve where
// /proc's path cannot be read as one: a file deleted since (" (deleted)"),
// or a path /proc cannot show under root (another mount namespace).
func nameUnder(root, full string) (string, error) {
	if full == root {
		return ".", nil
	}
	rel, ok := strings.CutPrefix(full, strings.TrimSuffix(root, "/")+"/")
	if !ok || !fs.ValidPath(rel) || strings.HasSuffix(rel, " (deleted)") {
		return "", errNoKernelResolve
	}
	return rel, nil
}
